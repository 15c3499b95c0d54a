"""`dandizarr convert SRC DST --to zarr3-sharded|precomputed-sharded`: re-shard a local array.

SRC is a Zarr v2/v3 array (sharded or not) or a precomputed volume; DST must not exist or be
an empty directory. The conversion streams one output shard at a time (progress on stderr).
"""

from __future__ import annotations

import argparse
from typing import Any, cast

from dandizarr.commands import Subparsers
from dandizarr.commands.errors import CommandError


def _shape(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of integers"
        ) from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: sizes must be positive")
    return values


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list") from None


def _bits(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value <= 64:
        raise argparse.ArgumentTypeError(f"{value} is not in [0, 64]")
    return value


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "convert",
        help="convert a local array to a sharded Zarr v3 array or a sharded precomputed volume",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("src", metavar="SRC", help="Zarr v2/v3 array or precomputed volume")
    parser.add_argument("dst", metavar="DST", help="output directory (absent or empty)")
    parser.add_argument(
        "--to",
        required=True,
        dest="target",
        metavar="FORMAT",
        help="zarr3-sharded or precomputed-sharded",
    )
    parser.add_argument(
        "--chunk-shape",
        type=_shape,
        help="inner chunk shape, e.g. 32,32,32 (default: the source's, or 64^3 for precomputed)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    zarr = parser.add_argument_group("zarr3-sharded")
    zarr.add_argument(
        "--shard-shape", type=_shape, help="e.g. 128,128,128 (default: about 64 MiB per shard)"
    )
    zarr.add_argument("--codec", default="zstd", help="zstd (default), gzip, blosc or none")
    zarr.add_argument("--level", type=int, help="compression level of --codec")
    zarr.add_argument("--index-location", default="end", help="start or end (default)")
    zarr.add_argument(
        "--no-index-crc32c", action="store_true", help="no crc32c checksum on the shard index"
    )

    pre = parser.add_argument_group("precomputed-sharded")
    pre.add_argument("--preshift-bits", type=_bits)
    pre.add_argument("--minishard-bits", type=_bits)
    pre.add_argument("--shard-bits", type=_bits, help="(defaults derive from the volume size)")
    pre.add_argument("--hash", default="identity", help="identity (default) or murmurhash3_x86_128")
    pre.add_argument("--minishard-index-encoding", default="raw", help="raw (default) or gzip")
    pre.add_argument("--data-encoding", default="raw", help="raw (default) or gzip")
    pre.add_argument("--resolution", type=_floats, default=(1.0, 1.0, 1.0), help="e.g. 4,4,40")
    parser.set_defaults(func=run)


def _choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise CommandError(f"{name} must be one of {', '.join(choices)}, not {value!r}", 2)
    return value


def run(args: argparse.Namespace) -> int:
    from dandizarr.sharding.convert import (
        TARGETS,
        ConvertError,
        PrecomputedShardedOptions,
        Zarr3ShardedOptions,
        convert,
        describe,
    )

    target = _choice("--to", args.target, TARGETS)
    options: Zarr3ShardedOptions | PrecomputedShardedOptions
    if target == "zarr3-sharded":
        options = Zarr3ShardedOptions(
            shard_shape=args.shard_shape,
            chunk_shape=args.chunk_shape,
            codec=cast(Any, _choice("--codec", args.codec, ("zstd", "gzip", "blosc", "none"))),
            level=args.level,
            index_location=cast(
                Any, _choice("--index-location", args.index_location, ("start", "end"))
            ),
            index_crc32c=not args.no_index_crc32c,
        )
    else:
        if args.shard_shape is not None:
            raise CommandError("--shard-shape applies to zarr3-sharded; use the *-bits options", 2)
        if len(args.resolution) != 3:
            raise CommandError("--resolution needs 3 numbers", 2)
        encodings = ("raw", "gzip")
        options = PrecomputedShardedOptions(
            chunk_shape=args.chunk_shape,
            preshift_bits=args.preshift_bits,
            minishard_bits=args.minishard_bits,
            shard_bits=args.shard_bits,
            hash=cast(Any, _choice("--hash", args.hash, ("identity", "murmurhash3_x86_128"))),
            minishard_index_encoding=cast(
                Any,
                _choice("--minishard-index-encoding", args.minishard_index_encoding, encodings),
            ),
            data_encoding=cast(Any, _choice("--data-encoding", args.data_encoding, encodings)),
            resolution=args.resolution,
        )
    try:
        result = convert(args.src, args.dst, target, options, progress=not args.no_progress)
    except ConvertError as error:
        raise CommandError(str(error)) from None
    print(describe(result))
    return 0
