#!/usr/bin/python3
"""Reference cases for imaging_test: small images in every mode the decoders produce, and what the
real Pillow makes of them (Debian 12's python3-pil, 9.4; run with /usr/bin/python3).

Writes tests/unit/data/imaging/:
  *.png / *.jpg / *.webp  the encoded inputs (made here by Pillow, or by the small PNG writer below
                          for what Pillow cannot write: 2-bit grey, 16-bit colour, a short palette)
  *.rgb                   raw interleaved RGB bytes, rows top to bottom
  big_*.png               the larger resize case's source and outputs (lossless, to stay small)
  cases.txt               one case a line:
    refuse <input>
        Pillow cannot open or load it (damaged files): DecodeImage must refuse it too.
    decode <input> <w> <h> <expected.rgb> <orientation> <stored.rgb>
        Image.open + ImageOps.exif_transpose + convert("RGB") (diffusers' load_image) is <expected>;
        without exif_transpose it is <stored> (same file when the orientation is 1).
    resize <source> <sw> <sh> <filter> <w> <h> <box|-> <expected>
        source.resize((w, h), filter, box) with box "l,t,r,b" or "-" (none); source and expected are
        .rgb, or .png (decoded by the library under test, itself checked by the decode cases).

Deterministic: fixed seeds, no timestamps; running it twice gives the same bytes.
"""
import io
import os
import random
import struct
import sys
import zlib

import PIL
from PIL import Image, ImageOps

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "imaging")
FILTERS = {
    "nearest": Image.Resampling.NEAREST,
    "box": Image.Resampling.BOX,
    "bilinear": Image.Resampling.BILINEAR,
    "hamming": Image.Resampling.HAMMING,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}
lines = []


def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def rgb_bytes(im):
    assert im.mode == "RGB"
    return im.tobytes()


# --- A minimal PNG writer for layouts Pillow does not write. ---
def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def write_png(name, width, height, bit_depth, color_type, rows, plte=None, trns=None, extra=b""):
    raw = b"".join(b"\0" + row for row in rows)
    data = b"\x89PNG\r\n\x1a\n"
    data += png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0))
    if plte is not None:
        data += png_chunk(b"PLTE", plte)
    if trns is not None:
        data += png_chunk(b"tRNS", trns)
    data += extra
    data += png_chunk(b"IDAT", zlib.compress(raw, 9))
    data += png_chunk(b"IEND", b"")
    write(name, data)


ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def write_interlaced_png(name, width, height, bit_depth, color_type, pixels, pack):
    """Adam7: pixels[y][x] is a tuple of samples; pack(row of pixels) -> row bytes."""
    raw = b""
    for (x0, y0, dx, dy) in ADAM7:
        xs = list(range(x0, width, dx))
        ys = list(range(y0, height, dy))
        if not xs or not ys:
            continue
        for y in ys:
            raw += b"\0" + pack([pixels[y][x] for x in xs])
    data = b"\x89PNG\r\n\x1a\n"
    data += png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 1))
    data += png_chunk(b"IDAT", zlib.compress(raw, 9))
    data += png_chunk(b"IEND", b"")
    write(name, data)


def pack_bits(values, bits):
    out = bytearray()
    acc, n = 0, 0
    for v in values:
        acc = (acc << bits) | v
        n += bits
        if n == 8:
            out.append(acc)
            acc, n = 0, 0
    if n:
        out.append(acc << (8 - n))
    return bytes(out)


def decode_case(name):
    """Record what load_image gives for the input file `name`."""
    path = os.path.join(OUT, name)
    try:
        with Image.open(path) as im:
            im.load()
            stored = im.convert("RGB")
            transposed = ImageOps.exif_transpose(im).convert("RGB")
            orientation = im.getexif().get(0x0112, 1)
    except (OSError, SyntaxError, ValueError) as e:  # Pillow refuses the file
        lines.append(f"refuse {name}")
        print(f"{name}: Pillow refuses it ({e})", file=sys.stderr)
        return None
    base = os.path.splitext(name)[0] + "_" + os.path.splitext(name)[1][1:]
    stored_name = base + ".stored.rgb"
    write(stored_name, rgb_bytes(stored))
    expected_name = stored_name
    if transposed.size != stored.size or transposed.tobytes() != stored.tobytes():
        expected_name = base + ".rgb"
        write(expected_name, rgb_bytes(transposed))
    w, h = transposed.size
    lines.append(f"decode {name} {w} {h} {expected_name} {orientation or 1} {stored_name}")
    return transposed


def resize_cases(source_name, im, sizes, filters, boxes=()):
    sw, sh = im.size
    for (w, h) in sizes:
        for f in filters:
            out = im.resize((w, h), FILTERS[f])
            name = f"{os.path.splitext(source_name)[0]}.{f}.{w}x{h}.rgb"
            write(name, rgb_bytes(out))
            lines.append(f"resize {source_name} {sw} {sh} {f} {w} {h} - {name}")
    for (w, h, box) in boxes:
        for f in filters:
            out = im.resize((w, h), FILTERS[f], box=box)
            name = f"{os.path.splitext(source_name)[0]}.{f}.{w}x{h}.box.rgb"
            write(name, rgb_bytes(out))
            box_text = ",".join(repr(float(v)) for v in box)
            lines.append(f"resize {source_name} {sw} {sh} {f} {w} {h} {box_text} {name}")


def exif_with_orientation(value):
    exif = Image.Exif()
    exif[0x0112] = value
    return exif.tobytes()


def main():
    assert PIL.__version__ == "9.4.0", f"expected Debian 12's Pillow 9.4.0, got {PIL.__version__}"
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.remove(os.path.join(OUT, f))
    rng = random.Random(20261204)

    # Sources.
    noise = Image.frombytes("RGB", (31, 23), bytes(rng.randrange(256) for _ in range(31 * 23 * 3)))
    gradient = Image.new("RGB", (40, 26))
    gradient.putdata([(x * 255 // 39, y * 255 // 25, (x * 7 + y * 11) % 256)
                      for y in range(26) for x in range(40)])
    # Smooth content with hard edges (negative filter lobes clip at 0 and 255).
    photo = Image.new("RGB", (32, 24))
    photo.putdata([((x * 8) % 256, 255 if (x // 4 + y // 4) % 2 else 0, (y * 10 + x) % 256)
                   for y in range(24) for x in range(32)])

    # PNG: Pillow's own writer.
    noise.save(os.path.join(OUT, "rgb_noise.png"))
    gradient.save(os.path.join(OUT, "rgb_gradient.png"))
    photo.save(os.path.join(OUT, "rgb_photo.png"))
    gradient.convert("L").save(os.path.join(OUT, "gray.png"))
    gradient.convert("1").save(os.path.join(OUT, "bilevel.png"))
    la = Image.merge("LA", (gradient.convert("L"), noise.resize((40, 26)).convert("L")))
    la.save(os.path.join(OUT, "gray_alpha.png"))
    rgba = gradient.copy()
    rgba.putalpha(noise.resize((40, 26), Image.Resampling.NEAREST).convert("L"))
    rgba.save(os.path.join(OUT, "rgba.png"))
    pal = gradient.convert("P", palette=Image.Palette.ADAPTIVE, colors=200)
    pal.info["transparency"] = 3
    pal.save(os.path.join(OUT, "palette_trns.png"), transparency=3)
    pal16 = gradient.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    pal16.save(os.path.join(OUT, "palette_4bit.png"))
    pal2 = gradient.convert("1").convert("P")
    pal2.save(os.path.join(OUT, "palette_1bit.png"), bits=1)
    i16 = Image.new("I;16", (23, 11))
    i16.putdata([(x * 37 + y * 401) % 1200 for y in range(11) for x in range(23)])
    i16.save(os.path.join(OUT, "gray16.png"))
    gradient.save(os.path.join(OUT, "exif6.png"), exif=exif_with_orientation(6))
    Image.new("RGB", (1, 1), (12, 200, 99)).save(os.path.join(OUT, "one_pixel.png"))

    # PNG: layouts Pillow does not write.
    w, h = 13, 7
    write_png("gray2bit.png", w, h, 2, 0, [pack_bits([(x + y) % 4 for x in range(w)], 2) for y in range(h)])
    write_png("gray4bit.png", w, h, 4, 0, [pack_bits([(x * 3 + y) % 16 for x in range(w)], 4) for y in range(h)])
    write_png("rgb16.png", w, h, 16, 2,
              [b"".join(struct.pack(">HHH", (x * 5003 + y) % 65536, (y * 9001) % 65536, 65535 - x * 97)
                        for x in range(w)) for y in range(h)])
    write_png("rgba16.png", w, h, 16, 6,
              [b"".join(struct.pack(">HHHH", (x * 4099) % 65536, (y * 7001) % 65536, 300 * x, 65535 - 1000 * y)
                        for x in range(w)) for y in range(h)])
    write_png("gray_alpha16.png", w, h, 16, 4,
              [b"".join(struct.pack(">HH", (x * 5000 + y * 3) % 65536, 1234 * y) for x in range(w))
               for y in range(h)])
    # 4 palette entries, indices up to 9: Pillow shows the grey ramp past the palette.
    write_png("palette_short.png", w, h, 8, 3, [bytes((x + y) % 10 for x in range(w)) for y in range(h)],
              plte=bytes([255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30]), trns=bytes([0, 128]))
    write_png("gray_trns.png", w, h, 8, 0, [bytes((x * 19 + y * 3) % 256 for x in range(w)) for y in range(h)],
              trns=struct.pack(">H", 19))

    # Interlaced (Adam7): Pillow reads them, but does not write them.
    w, h = 19, 11
    rgb_px = [[((x * 13 + y) % 256, (y * 23) % 256, (x * y) % 256) for x in range(w)] for y in range(h)]
    write_interlaced_png("interlaced_rgb.png", w, h, 8, 2, rgb_px, lambda row: b"".join(bytes(p) for p in row))
    gray_px = [[(x + 2 * y) % 4 for x in range(w)] for y in range(h)]
    write_interlaced_png("interlaced_gray2bit.png", w, h, 2, 0, gray_px, lambda row: pack_bits(row, 2))

    # JPEG.
    photo_big = photo.resize((64, 48), Image.Resampling.BICUBIC)
    photo_big.save(os.path.join(OUT, "q90_444.jpg"), quality=90, subsampling=0)
    photo_big.save(os.path.join(OUT, "q50_420.jpg"), quality=50, subsampling=2)
    noise.save(os.path.join(OUT, "odd_422.jpg"), quality=75, subsampling=1)
    photo_big.save(os.path.join(OUT, "progressive.jpg"), quality=80, progressive=True)
    gradient.convert("L").save(os.path.join(OUT, "gray.jpg"), quality=85)
    photo_big.convert("CMYK").save(os.path.join(OUT, "cmyk.jpg"), quality=90)
    for o in (3, 6, 8):
        gradient.save(os.path.join(OUT, f"exif{o}.jpg"), quality=92, exif=exif_with_orientation(o))

    # WebP.
    photo_big.save(os.path.join(OUT, "lossy.webp"), quality=80, method=4)
    noise.save(os.path.join(OUT, "lossless.webp"), lossless=True)
    rgba.save(os.path.join(OUT, "lossy_alpha.webp"), quality=70, method=4)
    rgba.save(os.path.join(OUT, "lossless_alpha.webp"), lossless=True, exact=True)
    gradient.save(os.path.join(OUT, "exif5.webp"), lossless=True, exif=exif_with_orientation(5))

    # Damaged files: Pillow's verdict (refuse, or the pixels it decodes) is the reference.
    def read(name):
        with open(os.path.join(OUT, name), "rb") as f:
            return f.read()

    for name in ("rgb_noise.png", "q90_444.jpg", "progressive.jpg", "lossy.webp", "lossless.webp"):
        data = read(name)
        stem, ext = os.path.splitext(name)
        write(f"cut_half_{stem}{ext}", data[: len(data) // 2])
        write(f"cut_last2_{stem}{ext}", data[:-2])  # JPEG: no EOI; PNG: in IEND's checksum
    tiny_ihdr = struct.pack(">IIBBBBB", 3, 2, 8, 2, 0, 0, 0)
    tiny_idat = zlib.compress(b"\0" + bytes(range(9)) + b"\0" + bytes(range(100, 109)))
    sig = b"\x89PNG\r\n\x1a\n"

    def bad(chunk):  # the same chunk with a wrong checksum
        return chunk[:-4] + bytes(4)

    ihdr, idat, iend = png_chunk(b"IHDR", tiny_ihdr), png_chunk(b"IDAT", tiny_idat), png_chunk(b"IEND", b"")
    text = png_chunk(b"tEXt", b"k\0v")
    write("crc_ihdr.png", sig + bad(ihdr) + idat + iend)
    write("crc_text_before_idat.png", sig + ihdr + bad(text) + idat + iend)
    write("crc_idat.png", sig + ihdr + bad(idat) + iend)
    write("crc_text_after_idat.png", sig + ihdr + idat + bad(text) + iend)
    write("no_iend.png", sig + ihdr + idat)

    inputs = sorted(f for f in os.listdir(OUT) if f.endswith((".png", ".jpg", ".webp")))
    decoded = {name: decode_case(name) for name in inputs}
    assert all(decoded[n] is not None for n in inputs if not n.startswith(("cut_", "crc_")))

    # Resizes of 8-bit RGB (what diffusers resizes after load_image).
    all_filters = list(FILTERS)
    for name in ("rgb_noise.png", "rgb_gradient.png", "odd_422.jpg"):
        im = decoded[name]
        source = os.path.splitext(name)[0] + "_src.rgb"
        write(source, rgb_bytes(im))
        sw, sh = im.size
        sizes = [
            (sw * 2 + 3, sh * 2 + 1),        # upscale, non-integer ratio
            (sw * 2, sh * 2),                # upscale x2
            (max(1, sw // 3), max(1, sh // 3)),  # downscale
            (int(sw / 1.7), int(sh / 1.3)),  # downscale, non-integer ratio
            (sw + 9, sh),                    # horizontal only
            (sw, sh - 7),                    # vertical only
            (sw // 2, sh * 2),               # down in x, up in y
            (sw, sh),                        # identity (a copy)
            (1, 1),
        ]
        boxes = [(sw // 2 + 1, sh // 2, (2.5, 1.25, sw - 3.5, sh - 0.75)),
                 (sw - 4, sh - 6, (2.0, 3.0, sw - 2.0, sh - 3.0))]  # integer box of the output size: a crop
        resize_cases(source, im, sizes, all_filters, boxes)

    # A larger source, large ratios (Flux2's area resize / Kontext's preferred sizes are LANCZOS).
    big = Image.new("RGB", (500, 375))
    big.putdata([(x * 255 // 499, y * 255 // 374, 255 if ((x // 25) + (y // 25)) % 2 else 30)
                 for y in range(375) for x in range(500)])
    big.save(os.path.join(OUT, "big_src.png"), optimize=True)
    for (w, h, f) in ((128, 96, "lanczos"), (333, 250, "lanczos"), (333, 250, "bicubic"), (97, 131, "bilinear"),
                      (128, 96, "nearest")):
        name = f"big_{f}_{w}x{h}.png"
        big.resize((w, h), FILTERS[f]).save(os.path.join(OUT, name), optimize=True)
        lines.append(f"resize big_src.png 500 375 {f} {w} {h} - {name}")

    with open(os.path.join(OUT, "cases.txt"), "w") as f:
        f.write("# Made by tests/unit/data/make_imaging_cases.py with Pillow %s. Do not edit.\n" % PIL.__version__)
        f.write("\n".join(lines) + "\n")
    total = sum(os.path.getsize(os.path.join(OUT, n)) for n in os.listdir(OUT))
    print(f"{len(lines)} cases, {len(os.listdir(OUT))} files, {total} bytes in {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
