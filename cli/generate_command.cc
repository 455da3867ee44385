// ditserve-cli generate: one generation through GenerateStream (or Generate with --unary), progress
// on stderr, the image in -o FILE and a one-line JSON summary on stdout.
#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"
#include "cli/channel.h"
#include "cli/commands.h"
#include "cli/generate_request.h"
#include "cli/output.h"
#include "cli/progress.h"
#include "common/flags.h"
#include "common/grpc_status.h"
#include "ditserve/v1/ditserve.grpc.pb.h"

namespace ditserve::cli {
namespace {

using ditserve::v1::GenerateEvent;
using ditserve::v1::GenerateRequest;
using ditserve::v1::GenerateResponse;

void Bind(FlagParser* p, GenerateOptions* o) {
  BindConnectionFlags(p, &o->connection);
  p->AddString("prompt", &o->prompt, "text prompt");
  p->AddString("prompt-2", &o->prompt_2, "second prompt (T5 for FLUX.1); defaults to --prompt");
  p->AddString("negative-prompt", &o->negative_prompt,
               "negative prompt (with --true-cfg-scale > 1)");
  p->AddString("negative-prompt-2", &o->negative_prompt_2, "second negative prompt");
  p->AddUint("steps", &o->steps, "denoising steps; 0 = model default");
  p->AddUint("seed", &o->seed, "random seed; random when not given (the seed used is printed)");
  p->AddUint("height", &o->height, "image height in pixels; 0 = model default");
  p->AddUint("width", &o->width, "image width in pixels; 0 = model default");
  p->AddDouble("guidance", &o->guidance, "distilled guidance scale; model default when not given");
  p->AddDouble("true-cfg-scale", &o->true_cfg_scale, "true classifier-free guidance; 0/1 = off");
  p->AddUint("max-sequence-length", &o->max_sequence_length, "T5 tokens; 0 = model default");
  p->AddString("format", &o->format, "png | raw (safetensors `image` F32 [H,W,3]) | latents");
  p->AddString("embeddings", &o->embeddings,
               "safetensors file with prompt_embeds [, pooled_prompt_embeds, text_mask]");
  p->AddString("negative-embeddings", &o->negative_embeddings,
               "same as --embeddings, for the negative prompt");
  p->AddString("request-id", &o->request_id, "request id echoed by the server; generated if empty");
  p->AddStringList("lora", &o->loras,
                   "NAME[:SCALE]: apply the server's LoRA adapter NAME with weight SCALE (default "
                   "1.0; see `info` for the adapters)");
  p->AddStringList("image", &o->images,
                   "FILE: an input image (PNG, JPEG or WebP), sent in order; what the model does "
                   "with it is `info`'s inputs.image_inputs.use");
  p->AddDouble("strength", &o->strength,
               "image to image: how much of the schedule runs from the noised input image, in "
               "(0, 1]; 0 = the model's default");
  p->AddDouble("cache-threshold", &o->cache_threshold,
               "step cache (First Block Cache): a step reuses the cached transformer blocks when "
               "the first block's output changed by at most this relative amount; 0 = off; not "
               "given: the server's default (see `info`'s step_cache)");
  p->AddUint("previews", &o->previews,
             "N (0..3): previews of the image in progress at evenly spaced steps, written as PNGs "
             "(see --preview-prefix)");
  p->AddString("preview-prefix", &o->preview_prefix,
               "preview k goes to <prefix><k>.png; default: the output file without its extension "
               "+ '.preview-'");
  p->AddString("output", &o->output, "output file (-o); '-' writes to stdout");
  p->AddBool("quiet", &o->quiet, "no progress output");
  p->AddBool("unary", &o->unary, "use the unary Generate call (no progress)");
}

// A Progress event's preview PNG to its file (--preview-prefix).
absl::Status WritePreview(const GenerateOptions& o, const ditserve::v1::Progress& p) {
  std::string prefix = o.preview_prefix;
  if (prefix.empty()) {
    if (o.output == "-") return absl::OkStatus();  // stdout is the image's
    const size_t dot = o.output.find_last_of('.');
    const size_t slash = o.output.find_last_of('/');
    const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
    prefix = (has_ext ? o.output.substr(0, dot) : o.output) + ".preview-";
  }
  return WriteOutputFile(absl::StrCat(prefix, p.preview_index(), ".png"), p.preview());
}

// Reads the stream to its end. The result is the last event; anything after it is a server bug but
// harmless, so it is ignored.
absl::StatusOr<GenerateResponse> CallStream(ditserve::v1::ImageGeneration::Stub* stub,
                                            const GenerateOptions& o, const GenerateRequest& req) {
  grpc::ClientContext context;
  ConfigureContext(o.connection, &context);
  ProgressReporter progress(ProgressReporter::DetectMode(o.quiet));
  std::unique_ptr<grpc::ClientReader<GenerateEvent>> reader = stub->GenerateStream(&context, req);
  std::optional<GenerateResponse> result;
  GenerateEvent event;
  while (reader->Read(&event)) {
    switch (event.event_case()) {
      case GenerateEvent::kQueued:
        progress.OnQueued(event.queued());
        break;
      case GenerateEvent::kProgress:
        progress.OnProgress(event.progress());
        if (!event.progress().preview().empty()) {
          if (absl::Status s = WritePreview(o, event.progress()); !s.ok()) return s;
        }
        break;
      case GenerateEvent::kResult:
        if (!result) result = std::move(*event.mutable_result());
        break;
      default:
        break;  // an event kind newer than this client
    }
  }
  progress.Finish();
  grpc::Status status = reader->Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  if (!result) return absl::InternalError("the stream ended without a result");
  return std::move(*result);
}

absl::StatusOr<GenerateResponse> CallUnary(ditserve::v1::ImageGeneration::Stub* stub,
                                           const GenerateOptions& o, const GenerateRequest& req) {
  grpc::ClientContext context;
  ConfigureContext(o.connection, &context);
  GenerateResponse response;
  grpc::Status status = stub->Generate(&context, req, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

}  // namespace

int RunGenerate(int argc, const char* const* argv, int first) {
  GenerateOptions o;
  FlagParser parser("ditserve-cli generate", "Generates one image and writes it to -o FILE.");
  Bind(&parser, &o);
  bool done = false;
  int code = ParseFlags(&parser, argc, argv, first, &done);
  if (done) return code;
  o.seed_set = parser.WasSet("seed");
  o.guidance_set = parser.WasSet("guidance");
  o.cache_threshold_set = parser.WasSet("cache-threshold");
  if (absl::Status s = ValidateConnectionFlags(&o.connection); !s.ok()) {
    return PrintError(s, kExitUsage);
  }
  absl::StatusOr<GenerateRequest> request = BuildGenerateRequest(o);
  if (!request.ok()) return PrintError(request.status(), kExitUsage);

  auto stub = ditserve::v1::ImageGeneration::NewStub(MakeChannel(o.connection));
  absl::StatusOr<GenerateResponse> response =
      o.unary ? CallUnary(stub.get(), o, *request) : CallStream(stub.get(), o, *request);
  if (!response.ok()) return PrintError(response.status(), kExitFailure);

  absl::StatusOr<std::string> bytes = EncodeOutput(*response, request->output_format());
  if (!bytes.ok()) return PrintError(bytes.status(), kExitFailure);
  if (absl::Status s = WriteOutputFile(o.output, *bytes); !s.ok()) {
    return PrintError(s, kExitFailure);
  }
  // With -o - the image owns stdout, so the summary goes to stderr.
  std::string summary = ResultSummaryJson(*response, o.output, bytes->size()) + "\n";
  std::fputs(summary.c_str(), o.output == "-" ? stderr : stdout);
  return kExitOk;
}

}  // namespace ditserve::cli
