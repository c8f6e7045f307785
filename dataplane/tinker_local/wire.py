"""Tinker wire formats: the SDK's own protobuf schema (tinker.proto.tinker_public_pb2) and JSON shapes.

Decoding turns request bodies into plain numpy/python values; encoding builds the protobuf
responses the SDK deserialises (`ForwardBackwardOutput`, `SampleResponse`).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zstandard


def _load_schema():
    """The SDK's generated protobuf module, loaded without importing the whole `tinker` package
    (its __init__ pulls in the full client, ~1.5 s of server start-up for nothing)."""
    name = "_tinker_public_pb2"
    if name in sys.modules:
        return sys.modules[name]
    package = importlib.util.find_spec("tinker")
    if package is None or package.origin is None:
        raise ImportError(
            "the tinker SDK is not installed: it comes with hermes-rl's train extra (pip install 'hermes-rl[train]')"
        )
    spec = importlib.util.spec_from_file_location(name, Path(package.origin).parent / "proto" / "tinker_public_pb2.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


pb = _load_schema()


class UserError(ValueError):
    """A request the caller got wrong: reported with category "user"."""


def number(
    value: object,
    name: str,
    low: float,
    high: float,
    *,
    integer: bool = False,
    low_open: bool = False,
    high_open: bool = False,
) -> float | int:
    """A request's numeric parameter, checked before it touches a model: a real number (not a bool,
    not text), finite, within [low, high] (open at an end with low_open/high_open); an int with
    `integer`. UserError naming the parameter otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"{name} must be a number, got {str(value)[:40]!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise UserError(f"{name} must be a finite number, got {value}")
    if integer and not float(value).is_integer():
        raise UserError(f"{name} must be a whole number, got {value}")
    below = value <= low if low_open else value < low
    above = value >= high if high_open else value > high
    if below or above:
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        raise UserError(f"{name} must be in {left}{low:g}, {high:g}{right}, got {value:g}")
    return int(value) if integer else float(value)


_DTYPES = {
    pb.DTYPE_FLOAT32: np.dtype(np.float32),
    pb.DTYPE_INT64: np.dtype(np.int64),
    pb.DTYPE_INT32: np.dtype(np.int32),
}


@dataclass
class Datum:
    tokens: list[int]
    inputs: dict[str, np.ndarray]


@dataclass
class ForwardBackwardRequest:
    model_id: str
    seq_id: int
    loss_fn: str
    loss_fn_config: dict[str, float | str]
    forward_only: bool
    data: list[Datum]


def decode_forward_backward(body: bytes, content_encoding: str | None = None) -> ForwardBackwardRequest:
    if content_encoding == "zstd":
        body = zstandard.ZstdDecompressor().decompress(body, max_output_size=1 << 31)
    msg = pb.ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except Exception as exc:  # protobuf raises DecodeError (a plain Exception subclass)
        raise UserError(f"forward_backward body is not a ForwardBackwardRequest protobuf: {exc}") from exc
    config: dict[str, float | str] = dict(msg.loss_fn_config)
    for key, value in msg.loss_fn_config_v2.items():
        config[key] = value.text if value.WhichOneof("value") == "text" else value.number
    data = []
    for index, datum in enumerate(msg.data):
        tokens: list[int] = []
        for chunk in datum.model_input:
            if chunk.WhichOneof("chunk") != "encoded_text":
                raise UserError(f"datum {index}: only text chunks are supported by tinker-local")
            tokens.extend(np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist())
        inputs = {name: decode_tensor(tensor, f"datum {index} {name}") for name, tensor in datum.loss_fn_inputs.items()}
        data.append(Datum(tokens=tokens, inputs=inputs))
    return ForwardBackwardRequest(
        model_id=msg.model_id,
        seq_id=msg.seq_id,
        loss_fn=msg.loss_fn,
        loss_fn_config=config,
        forward_only=msg.forward_only,
        data=data,
    )


def decode_tensor(tensor: pb.Tensor, what: str) -> np.ndarray:
    dtype = _DTYPES.get(tensor.dtype)
    if dtype is None:
        raise UserError(f"{what}: unsupported dtype {tensor.dtype}")
    shape = list(tensor.shape)
    if tensor.WhichOneof("encoding") == "sparse_csr":
        if len(shape) != 2:
            raise UserError(f"{what}: a sparse tensor needs a 2-D shape, got {shape}")
        values = np.frombuffer(tensor.sparse_csr.values, dtype=dtype)
        crow = np.frombuffer(tensor.sparse_csr.crow_indices, dtype=np.int64)
        cols = np.frombuffer(tensor.sparse_csr.col_indices, dtype=np.int64)
        if len(crow) != shape[0] + 1 or len(cols) != len(values):
            raise UserError(f"{what}: malformed sparse CSR tensor")
        dense = np.zeros(shape, dtype=dtype)  # every loss input pads with 0 (no token, no weight)
        for row in range(shape[0]):
            dense[row, cols[crow[row] : crow[row + 1]]] = values[crow[row] : crow[row + 1]]
        return _finite(dense, what)
    array = np.frombuffer(tensor.dense, dtype=dtype)
    if shape:
        if int(np.prod(shape)) != array.size:
            raise UserError(f"{what}: {array.size} values do not fill shape {shape}")
        array = array.reshape(shape)
    return _finite(array, what)


def _finite(array: np.ndarray, what: str) -> np.ndarray:
    """Loss inputs (weights, advantages, logprobs) must be finite: one NaN poisons every LoRA weight."""
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise UserError(f"{what}: holds NaN or infinite values")
    return array


def encode_forward_backward_output(outputs: list[dict[str, np.ndarray]], metrics: dict[str, float]) -> bytes:
    """One ArrayRecord batching every datum's fields (the SDK slices them back by offsets)."""
    msg = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", metrics=metrics)
    record = msg.loss_fn_outputs.add()
    record.type_tag = "ArrayRecord"
    record.num_datums = len(outputs)
    for name in outputs[0].keys() if outputs else ():
        arrays = [np.ascontiguousarray(out[name], dtype=np.float32) for out in outputs]
        trailing = list(arrays[0].shape[1:])
        if any(list(a.shape[1:]) != trailing for a in arrays):  # ragged: one record per datum
            return _encode_per_datum(outputs, metrics)
        offsets = np.cumsum([0] + [a.nbytes for a in arrays]).astype(np.int64)
        field = record.fields[name]
        field.data = b"".join(a.tobytes() for a in arrays)
        field.offsets = offsets.tobytes()
        field.dtype = pb.DTYPE_FLOAT32
        field.trailing_shape.extend(trailing)
    return msg.SerializeToString()


def _encode_per_datum(outputs: list[dict[str, np.ndarray]], metrics: dict[str, float]) -> bytes:
    msg = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", metrics=metrics)
    for out in outputs:
        record = msg.loss_fn_outputs.add()
        record.type_tag = "ArrayRecord"
        record.num_datums = 1
        for name, value in out.items():
            array = np.ascontiguousarray(value, dtype=np.float32)
            field = record.fields[name]
            field.data = array.tobytes()
            field.offsets = np.array([0, array.nbytes], dtype=np.int64).tobytes()
            field.dtype = pb.DTYPE_FLOAT32
            field.trailing_shape.extend(array.shape[1:])
    return msg.SerializeToString()


def _topk(rows: list[tuple[list[int], list[float]]], k: int) -> pb.TopkLogprobs:
    ids = np.zeros((len(rows), k), dtype=np.int32)
    values = np.full((len(rows), k), -99999.0, dtype=np.float32)
    for index, (row_ids, row_values) in enumerate(rows):
        ids[index, : len(row_ids)] = row_ids
        values[index, : len(row_values)] = row_values
    return pb.TopkLogprobs(token_ids=ids.tobytes(), logprobs=values.tobytes(), k=k, length=len(rows))


def _dense_tensor(values, dtype) -> pb.Tensor:
    array = np.asarray(values, dtype=dtype)
    proto_dtype = pb.DTYPE_INT64 if array.dtype == np.int64 else pb.DTYPE_FLOAT32
    return pb.Tensor(dense=array.tobytes(), dtype=proto_dtype, shape=list(array.shape))


def _csr_like(values: np.ndarray, crow: list[int], cols: list[int]) -> pb.Tensor:
    """float32 values at the cells of a request's CSR layout, in that same layout."""
    picked = [values[row, cols[i]] for row in range(len(crow) - 1) for i in range(crow[row], crow[row + 1])]
    csr = pb.SparseCsr(
        values=np.asarray(picked, dtype=np.float32).tobytes(),
        crow_indices=np.asarray(crow, dtype=np.int64).tobytes(),
        col_indices=np.asarray(cols, dtype=np.int64).tobytes(),
    )
    return pb.Tensor(sparse_csr=csr, dtype=pb.DTYPE_FLOAT32, shape=list(values.shape))


def encode_sample_response(result, topk_prompt: int, topk_sample: int, target_layout=None) -> bytes:
    """`result` is an engine.SampleResult; `target_layout` the (crow, cols) of a sparse
    target_prompt_logprobs request, answered in the same layout."""
    msg = pb.SampleResponse()
    for seq in result.sequences:
        out = msg.sequences.add()
        out.stop_reason = pb.STOP_REASON_STOP if seq.stop_reason == "stop" else pb.STOP_REASON_LENGTH
        out.tokens = np.asarray(seq.tokens, dtype=np.int32).tobytes()
        out.logprobs = np.asarray(seq.logprobs, dtype=np.float32).tobytes()
        if topk_sample:
            out.topk_sampled_logprobs.CopyFrom(_topk(seq.topk, topk_sample))
    if result.prompt_logprobs is not None:
        msg.prompt_logprobs = np.asarray(result.prompt_logprobs, dtype=np.float32).tobytes()
    if topk_prompt and result.topk_prompt is not None:
        msg.topk_prompt_logprobs.CopyFrom(_topk(result.topk_prompt, topk_prompt))
    if result.target_prompt is not None:
        values = np.asarray(result.target_prompt, dtype=np.float32)
        tensor = _dense_tensor(values, np.float32) if target_layout is None else _csr_like(values, *target_layout)
        msg.target_prompt_logprobs.CopyFrom(tensor)
    if result.alt_tokens is not None:
        ids, logprobs = result.alt_tokens
        msg.prompt_alt_tokens.tokens.CopyFrom(_dense_tensor(ids, np.int64))
        msg.prompt_alt_tokens.logprobs.CopyFrom(_dense_tensor(logprobs, np.float32))
    return msg.SerializeToString()
