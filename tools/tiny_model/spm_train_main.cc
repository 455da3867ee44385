// ditserve-spm-train OPTIONS: runs libsentencepiece's trainer with one SentencePiece options string
// ("--input=corpus.txt --model_prefix=spiece --vocab_size=1000 ..."), exactly as spm_train does.
//
// Why a separate executable: Debian's libsentencepiece carries and exports its own protobuf-lite
// runtime, which crashes any process that also loads libprotobuf (every ditserve binary does,
// through gRPC or LibTorch; see models/tokenizers/spm_model_proto.h). make-tiny-model therefore runs
// the trainer in this process of its own (tools/tiny_model/t5_spiece.h). It must link nothing but
// the C++ runtime and libsentencepiece, and include no Abseil header: sentencepiece_processor.h
// declares `absl::string_view` as std::string_view, which clashes with Debian's Abseil.
#include <cstdio>
#include <string>

#include <sentencepiece_trainer.h>

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr, "usage: ditserve-spm-train 'SENTENCEPIECE TRAINER OPTIONS'\n");
    return 2;
  }
  const auto status = sentencepiece::SentencePieceTrainer::Train(std::string(argv[1]));
  if (!status.ok()) {
    std::fprintf(stderr, "ditserve-spm-train: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
