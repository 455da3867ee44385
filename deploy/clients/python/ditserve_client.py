#!/usr/bin/python3
"""Python client of the ditserve public API (ditserve.v1.ImageGeneration + grpc.health.v1).

Runs with Debian's python3 and python3-grpcio (the only interpreter here that has grpcio), using
the stubs that the CMake build generates into <build>/python (target ditserve_python_stubs):

    /usr/bin/python3 ditserve_client.py --stubs build/python generate --prompt "a cat" -o cat.png

Same flags and output contract as ditserve-cli:
  * generate: progress on stderr (a bar on a terminal, else one line per event), the image in -o
    FILE ('-' = stdout), one JSON summary line on stdout (on stderr with -o -).
  * info: ModelInfo as JSON. health: the status name; exit 0 only when SERVING.
  * errors: "error: CODE_NAME: message" on stderr; exit 1 when the call failed, 2 for a bad
    command line (nothing sent).
"""

import argparse
import collections
import json
import os
import struct
import sys

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
MAX_RECEIVE_BYTES = 64 << 20  # raw float32 2048x2048 output is 48 MiB
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
    # Servers accept client pings every >= 10 s; keep pinging during a long call without data.
    ("grpc.keepalive_time_ms", 30000),
    ("grpc.keepalive_timeout_ms", 10000),
    ("grpc.http2.max_pings_without_data", 0),
]
FORMATS = {"png": 1, "raw": 2, "latents": 3}  # ditserve.v1.OutputFormat values
FORMAT_NAMES = {0: "png", 1: "png", 2: "raw", 3: "latents"}
FLOAT_MAX = 3.4028234663852886e38  # the largest float32 (LoraChoice.scale)


class UsageError(Exception):
    """A bad command line or unreadable input: exit 2, nothing was sent."""


class ClientError(Exception):
    """A failure after the call was made: exit 1. `code` is a status code name."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def print_error(code, message):
    sys.stderr.write("error: %s: %s\n" % (code, message))


def load_stubs(stubs_dir):
    """Imports the generated modules from stubs_dir and returns them."""
    if not stubs_dir:
        here = os.path.dirname(os.path.abspath(__file__))
        stubs_dir = os.path.join(here, "..", "..", "..", "build", "python")
    if not os.path.isfile(os.path.join(stubs_dir, "ditserve", "v1", "ditserve_pb2.py")):
        raise UsageError("no generated stubs in %s (build the target ditserve_python_stubs and "
                         "pass --stubs <build>/python or set DITSERVE_PY_STUBS)" % stubs_dir)
    sys.path.insert(0, os.path.abspath(stubs_dir))
    import grpc  # noqa: E402  (after the path is known, so a missing grpcio is reported clearly)
    # The health stubs live in <stubs>/grpc/health/v1, i.e. inside the name `grpc`, which is the
    # grpcio package itself. Extend that package's search path so grpc.health.v1 resolves there.
    grpc.__path__.append(os.path.join(os.path.abspath(stubs_dir), "grpc"))
    from ditserve.v1 import ditserve_pb2, ditserve_pb2_grpc
    from grpc.health.v1 import health_pb2, health_pb2_grpc
    return grpc, ditserve_pb2, ditserve_pb2_grpc, health_pb2, health_pb2_grpc


def uint(text):
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError("'%s' is not a non-negative integer" % text)
    if value < 0:
        raise argparse.ArgumentTypeError("'%s' is not a non-negative integer" % text)
    return value


def positive_seconds(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("'%s' is not a number" % text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number of seconds, got %s" % text)
    return value


def lora_choice(text):
    """NAME or NAME:SCALE -> (name, scale or None); None leaves the API's default, 1.0."""
    name, colon, scale = text.partition(":")
    if not name:
        raise argparse.ArgumentTypeError("must be NAME or NAME:SCALE, got '%s'" % text)
    if not colon:
        return name, None
    try:
        value = float(scale)
    except ValueError:
        value = float("nan")
    if not abs(value) <= FLOAT_MAX:  # NaN, infinities, and beyond float32
        raise argparse.ArgumentTypeError("%s: the scale '%s' is not a finite number "
                                         "(NAME:SCALE, e.g. %s:0.8)" % (text, scale, name))
    return name, value


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def build_parser():
    p = Parser(prog="ditserve_client.py", description=__doc__.split("\n")[0])
    p.add_argument("--stubs", default=os.environ.get("DITSERVE_PY_STUBS", ""),
                   help="directory of the generated Python stubs (<build>/python)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    def connection(sp, timeout):
        sp.add_argument("--server", default="127.0.0.1:50051", help="HOST:PORT of the frontend")
        sp.add_argument("--timeout", type=positive_seconds, default=timeout,
                        help="deadline of the call in seconds (default %(default)s)")
        sp.add_argument("--wait-for-ready", action="store_true",
                        help="wait for the server to come up instead of failing fast")
        sp.add_argument("--tls", action="store_true", help="connect over TLS (system roots)")
        sp.add_argument("--tls-ca", default="", help="connect over TLS trusting this PEM CA file")
        sp.add_argument("--tls-server-name", default="",
                        help="the name the certificate must carry (default: the --server host)")
        sp.add_argument("--token-file", default="",
                        help="file holding the bearer token (default: $DITSERVE_API_TOKEN)")

    g = sub.add_parser("generate", help="generate one image")
    connection(g, 600.0)
    g.add_argument("--prompt", default="")
    g.add_argument("--prompt-2", default="")
    g.add_argument("--negative-prompt", default="")
    g.add_argument("--negative-prompt-2", default="")
    g.add_argument("--steps", type=uint, default=0)
    g.add_argument("--seed", type=uint, default=None, help="random when not given")
    g.add_argument("--height", type=uint, default=0)
    g.add_argument("--width", type=uint, default=0)
    g.add_argument("--guidance", type=float, default=None, help="model default when not given")
    g.add_argument("--true-cfg-scale", type=float, default=0.0)
    g.add_argument("--max-sequence-length", type=uint, default=0)
    g.add_argument("--image", action="append", default=[], metavar="FILE",
                   help="an input image (PNG, JPEG or WebP) for a model that takes some (editing, "
                        "image to image); repeatable, in order")
    g.add_argument("--strength", type=float, default=0.0,
                   help="image to image: how far to noise the image, (0, 1]; 0 = the model's")
    g.add_argument("--format", choices=sorted(FORMATS), default="png")
    g.add_argument("--request-id", default="")
    g.add_argument("--lora", type=lora_choice, action="append", default=[], metavar="NAME[:SCALE]",
                   help="apply the server's LoRA adapter NAME with weight SCALE (default 1.0); "
                        "repeatable")
    g.add_argument("-o", "--output", required=True, help="output file, '-' for stdout")
    g.add_argument("--quiet", action="store_true", help="no progress output")

    i = sub.add_parser("info", help="print ModelInfo as JSON")
    connection(i, 30.0)

    h = sub.add_parser("health", help="print the health status; exit 0 only when SERVING")
    connection(h, 5.0)
    h.add_argument("--service", default="", help="service name; empty = overall")
    return p


def bearer_interceptor(grpc, token):
    """Adds 'authorization: Bearer TOKEN' to every unary and server-streaming call."""
    fields = ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")

    class Details(collections.namedtuple("Details", fields), grpc.ClientCallDetails):
        pass

    class Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
        def _with_token(self, d):
            md = list(d.metadata or []) + [("authorization", "Bearer " + token)]
            return Details(d.method, d.timeout, md, d.credentials,
                           getattr(d, "wait_for_ready", None), getattr(d, "compression", None))

        def intercept_unary_unary(self, continuation, details, request):
            return continuation(self._with_token(details), request)

        def intercept_unary_stream(self, continuation, details, request):
            return continuation(self._with_token(details), request)

    return Bearer()


def make_channel(grpc, args):
    """A channel to --server: TLS with --tls/--tls-ca, the bearer token on every call."""
    token = os.environ.get("DITSERVE_API_TOKEN", "")
    if args.token_file:
        try:
            with open(args.token_file) as f:
                token = f.read()
        except OSError as e:
            raise UsageError("--token-file: cannot read '%s': %s" % (args.token_file, e.strerror))
    token = token.rstrip("\r\n")
    options = list(CHANNEL_OPTIONS)
    if not (args.tls or args.tls_ca):
        channel = grpc.insecure_channel(args.server, options=options)
    else:
        roots = None
        if args.tls_ca:
            try:
                with open(args.tls_ca, "rb") as f:
                    roots = f.read()
            except OSError as e:
                raise UsageError("--tls-ca: cannot read '%s': %s" % (args.tls_ca, e.strerror))
        if args.tls_server_name:
            options.append(("grpc.ssl_target_name_override", args.tls_server_name))
        channel = grpc.secure_channel(args.server, grpc.ssl_channel_credentials(root_certificates=roots),
                                      options=options)
    if token:
        channel = grpc.intercept_channel(channel, bearer_interceptor(grpc, token))
    return channel


def rpc_error(grpc, err):
    code = err.code() if hasattr(err, "code") else None
    name = code.name if code is not None else "UNKNOWN"
    return ClientError(name, err.details() if hasattr(err, "details") else str(err))


class Progress:
    """Progress on stderr: a redrawn bar on a terminal, one stable line per event otherwise."""

    def __init__(self, quiet):
        self.mode = "quiet" if quiet else ("bar" if sys.stderr.isatty() else "lines")
        self.open = False

    def queued(self, q):
        if self.mode == "lines":
            sys.stderr.write("queued position=%d\n" % q.position)
        elif self.mode == "bar":
            sys.stderr.write("\rqueued, position %d\033[K" % q.position)
            self.open = True
        sys.stderr.flush()

    def step(self, p):
        if self.mode == "lines":
            sys.stderr.write("step %d/%d step_seconds=%.3f elapsed_seconds=%.3f\n"
                             % (p.step, p.total_steps, p.step_seconds, p.elapsed_seconds))
        elif self.mode == "bar":
            total = max(p.total_steps, 1)
            step = min(p.step, total)
            filled = step * 30 // total
            sys.stderr.write("\rstep %d/%d [%s%s] %3d%% %.2f s/step ETA %.1f s\033[K"
                             % (step, total, "#" * filled, "." * (30 - filled),
                                step * 100 // total, p.step_seconds,
                                p.step_seconds * (total - step)))
            self.open = True
        sys.stderr.flush()

    def finish(self):
        if self.open:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.open = False


def safetensors_bytes(name, dtype, shape, data, metadata):
    """One-tensor safetensors file: u64 LE header length, JSON header padded to 8, data."""
    header = {"__metadata__": metadata,
              name: {"dtype": dtype, "shape": list(shape), "data_offsets": [0, len(data)]}}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def encode_output(pb2, response, requested):
    got, want = FORMAT_NAMES.get(response.format, "png"), FORMAT_NAMES[requested]
    if got != want:
        raise ClientError("FAILED_PRECONDITION",
                          "asked for format %s, the server answered %s" % (want, got))
    metadata = {"request_id": response.request_id, "seed": str(response.seed),
                "num_inference_steps": str(response.num_inference_steps),
                "height": str(response.height), "width": str(response.width)}
    if want == "raw":
        expected = response.height * response.width * 3 * 4
        if expected == 0 or len(response.image) != expected:
            raise ClientError("DATA_LOSS", "raw image has %d bytes, %dx%dx3 float32 needs %d"
                              % (len(response.image), response.height, response.width, expected))
        return safetensors_bytes("image", "F32", [response.height, response.width, 3],
                                 response.image, metadata)
    if want == "latents":
        t = response.latents
        dtype = {pb2.DTYPE_FLOAT32: ("F32", 4), pb2.DTYPE_BFLOAT16: ("BF16", 2),
                 pb2.DTYPE_FLOAT16: ("F16", 2)}.get(t.dtype)
        numel = 1
        for d in t.shape:
            numel *= d
        if dtype is None or not t.shape or numel * dtype[1] != len(t.data):
            raise ClientError("DATA_LOSS", "latents tensor does not match its shape/dtype")
        return safetensors_bytes("latents", dtype[0], list(t.shape), t.data, metadata)
    if not response.image:
        raise ClientError("DATA_LOSS", "the server sent an empty image")
    return response.image


def write_output(path, data):
    if path == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # never leave a truncated file under the real name
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise ClientError("DATA_LOSS", "cannot write %s: %s" % (path, e.strerror))


def summary_json(response, output, nbytes):
    t = response.timings
    return json.dumps({
        "output": output, "format": FORMAT_NAMES.get(response.format, "png"), "bytes": nbytes,
        "request_id": response.request_id, "seed": str(response.seed),
        "num_inference_steps": response.num_inference_steps,
        "height": response.height, "width": response.width,
        "timings": {"queue_seconds": t.queue_seconds, "encode_seconds": t.encode_seconds,
                    "denoise_seconds": t.denoise_seconds, "decode_seconds": t.decode_seconds,
                    "total_seconds": t.total_seconds},
    }, separators=(",", ":"))


def cmd_generate(stubs, args):
    grpc, pb2, pb2_grpc, _, _ = stubs
    try:
        req = pb2.GenerateRequest(
            prompt=args.prompt, prompt_2=args.prompt_2, negative_prompt=args.negative_prompt,
            negative_prompt_2=args.negative_prompt_2, num_inference_steps=args.steps,
            height=args.height, width=args.width, true_cfg_scale=args.true_cfg_scale,
            max_sequence_length=args.max_sequence_length, output_format=FORMATS[args.format],
            request_id=args.request_id, strength=args.strength)
        if args.seed is not None:
            req.seed = args.seed
        if args.guidance is not None:
            req.guidance_scale = args.guidance
        for name, scale in args.lora:
            choice = req.loras.add(name=name)
            if scale is not None:
                choice.scale = scale
    except ValueError as e:  # out of the uint32/uint64 range
        raise UsageError(str(e))
    for path in args.image:
        try:
            with open(path, "rb") as f:
                req.images.append(f.read())
        except OSError as e:
            raise UsageError("--image %s: %s" % (path, e.strerror))
    stub = pb2_grpc.ImageGenerationStub(make_channel(grpc, args))
    progress = Progress(args.quiet)
    result = None
    try:
        for event in stub.GenerateStream(req, timeout=args.timeout,
                                         wait_for_ready=args.wait_for_ready):
            kind = event.WhichOneof("event")
            if kind == "queued":
                progress.queued(event.queued)
            elif kind == "progress":
                progress.step(event.progress)
            elif kind == "result" and result is None:
                result = event.result
    except grpc.RpcError as e:
        progress.finish()
        raise rpc_error(grpc, e)
    progress.finish()
    if result is None:
        raise ClientError("INTERNAL", "the stream ended without a result")
    data = encode_output(pb2, result, req.output_format)
    write_output(args.output, data)
    out = sys.stderr if args.output == "-" else sys.stdout
    out.write(summary_json(result, args.output, len(data)) + "\n")
    return EXIT_OK


def cmd_info(stubs, args):
    grpc, pb2, pb2_grpc, _, _ = stubs
    from google.protobuf import json_format
    stub = pb2_grpc.ImageGenerationStub(make_channel(grpc, args))
    try:
        info = stub.GetModelInfo(pb2.GetModelInfoRequest(), timeout=args.timeout,
                                 wait_for_ready=args.wait_for_ready)
    except grpc.RpcError as e:
        raise rpc_error(grpc, e)
    sys.stdout.write(json_format.MessageToJson(info, including_default_value_fields=True,
                                               preserving_proto_field_name=True) + "\n")
    return EXIT_OK


def cmd_health(stubs, args):
    grpc, _, _, health_pb2, health_pb2_grpc = stubs
    stub = health_pb2_grpc.HealthStub(make_channel(grpc, args))
    try:
        resp = stub.Check(health_pb2.HealthCheckRequest(service=args.service),
                          timeout=args.timeout, wait_for_ready=args.wait_for_ready)
    except grpc.RpcError as e:
        raise rpc_error(grpc, e)
    status = resp.status
    try:
        name = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
    except ValueError:
        name = "UNKNOWN"
    sys.stdout.write(name + "\n")
    return EXIT_OK if status == health_pb2.HealthCheckResponse.SERVING else EXIT_FAILURE


def main(argv):
    try:
        args = build_parser().parse_args(argv)
        stubs = load_stubs(args.stubs)
    except UsageError as e:
        print_error("INVALID_ARGUMENT", str(e))
        return EXIT_USAGE
    except ImportError as e:
        print_error("FAILED_PRECONDITION", "%s (run with /usr/bin/python3, which has "
                    "python3-grpcio)" % e)
        return EXIT_USAGE
    commands = {"generate": cmd_generate, "info": cmd_info, "health": cmd_health}
    try:
        return commands[args.command](stubs, args)
    except UsageError as e:
        print_error("INVALID_ARGUMENT", str(e))
        return EXIT_USAGE
    except ClientError as e:
        print_error(e.code, str(e))
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
