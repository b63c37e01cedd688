"""What a faster embedding backend buys on the CPU, for the documents worker's MiniLM.

The app embeds with sentence-transformers on torch. This runs the same weights, on the
same passages in the same batches and threads, through ONNX Runtime (fp32, and int8 by
dynamic quantisation) and, where it is installed, OpenVINO; the runs are paired (one of
each backend per round, several rounds, in one process) and a backend only counts if the
top-5 passages of every question stay the same, in the same order.

Why not sentence-transformers' own backend="onnx": it loads through optimum-onnx, which
pins transformers < 4.58, so installing it would downgrade the transformers 5 the project
runs. onnxruntime is here already (markitdown -> magika); exporting the model needs the
`onnx` package (torch's exporter writes through it), so without it the ONNX figures are
"not measured" with the reason. OpenVINO (a 180 MB install) is measured only if present.
The figures measured so far are in bench/docs.py's docstring.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from core.docs.chunking import Chunk
from core.docs.embeddings import DEFAULT_BATCH_SIZE, Embedder
from core.docs.retrieval import VectorIndex

Encode = Callable[[list[str]], np.ndarray]


def export_onnx(model_dir: Path, out: Path) -> Path:
    """MiniLM's transformer (token states; pooling is done outside) as an ONNX file.

    Eager attention, so ONNX Runtime sees plain MatMul/Softmax it can fuse; torch's
    TorchScript exporter with dynamic batch and sequence axes.
    """
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()

    class TokenStates(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: ANN001
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    names = ["input_ids", "attention_mask", "token_type_ids"]
    example = tuple(torch.ones((2, 8), dtype=torch.int64) for _ in names)
    with torch.no_grad():
        torch.onnx.export(TokenStates(), example, str(out), input_names=names,
                          output_names=["states"], opset_version=17, dynamo=False,
                          dynamic_axes={n: {0: "batch", 1: "tokens"} for n in [*names, "states"]})
    return out


def pooled_encoder(model_dir: Path, run: Callable[[dict[str, np.ndarray]], np.ndarray],
                   batch: int) -> Encode:
    """Tokenise as sentence-transformers does (MiniLM's tokenizer, its max_seq_length),
    run `run` on each batch, mean-pool over the real tokens, L2-normalise."""
    from tokenizers import Tokenizer

    config = json.loads((model_dir / "sentence_bert_config.json").read_text())
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(int(config["max_seq_length"]))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def encode(texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), 384), dtype=np.float32)
        for start in range(0, len(texts), batch):
            enc = tokenizer.encode_batch(texts[start:start + batch])
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            states = run({"input_ids": ids, "attention_mask": mask,
                          "token_type_ids": np.zeros_like(ids)})
            weights = mask[..., None].astype(np.float32)
            pooled = (states * weights).sum(1) / np.clip(weights.sum(1), 1e-9, None)
            out[start:start + len(enc)] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        return out

    return encode


def onnxruntime_runner(path: Path, threads: int) -> Callable[[dict], np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)[0]


def openvino_runner(path: Path, threads: int, precision: str | None) -> Callable[[dict], np.ndarray]:
    """OpenVINO on the same ONNX file; `precision` None is its default (bf16 where the CPU
    has AMX or AVX512-BF16: faster, and not the same numbers)."""
    import openvino as ov

    config: dict[str, object] = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"}
    if precision:
        config["INFERENCE_PRECISION_HINT"] = precision
    compiled = ov.Core().compile_model(str(path), "CPU", config)
    return lambda feeds: compiled(feeds)[0]


def _top5(chunks: list[Chunk], vectors: np.ndarray, queries: np.ndarray) -> list[list[int]]:
    index = VectorIndex()
    index.add(chunks, vectors)
    return [[h.row for h in index.search(q, 5)] for q in queries]


def compare(model_dir: Path, chunks: list[Chunk], questions: list[str], work: Path, *,
            repeats: int = 3) -> dict[str, object]:
    """Paired passages/s of each backend against torch, and whether its top-5 is the same.

    Ratios are the backend's passages/s over torch's in the same round (higher is better),
    the median over rounds; `cpu` ratios use the process's CPU seconds instead of the
    clock, which a box busy with other work disturbs less."""
    torch_embedder = Embedder(idle_seconds=0, model_path=model_dir)
    threads = torch_embedder.batch_threads
    texts = [c.text for c in chunks]
    backends: dict[str, Encode] = {"torch": torch_embedder.encode}
    out: dict[str, object] = {"passages": len(texts), "questions": len(questions),
                              "batch": DEFAULT_BATCH_SIZE, "threads": threads,
                              "repeats": repeats}
    if importlib.util.find_spec("onnx") is None:
        out["onnx"] = "not measured: exporting needs the onnx package (pip install onnx)"
    else:
        fp32 = export_onnx(model_dir, work / "minilm.onnx")
        from onnxruntime.quantization import QuantType, quantize_dynamic

        int8 = work / "minilm-int8.onnx"
        quantize_dynamic(str(fp32), str(int8), per_channel=True, weight_type=QuantType.QInt8)
        backends["onnx"] = pooled_encoder(model_dir, onnxruntime_runner(fp32, threads),
                                          DEFAULT_BATCH_SIZE)
        backends["onnx_int8"] = pooled_encoder(model_dir, onnxruntime_runner(int8, threads),
                                               DEFAULT_BATCH_SIZE)
        if importlib.util.find_spec("openvino") is None:
            out["openvino"] = "not measured: not installed (pip install openvino)"
        else:
            backends["openvino_f32"] = pooled_encoder(
                model_dir, openvino_runner(fp32, threads, "f32"), DEFAULT_BATCH_SIZE)
            backends["openvino_default"] = pooled_encoder(
                model_dir, openvino_runner(fp32, threads, None), DEFAULT_BATCH_SIZE)

    reference_queries = np.vstack([torch_embedder.encode([q]) for q in questions])
    reference_vectors = torch_embedder.encode(texts)
    reference_top5 = _top5(chunks, reference_vectors, reference_queries)
    wall: dict[str, list[float]] = {name: [] for name in backends}
    cpu: dict[str, list[float]] = {name: [] for name in backends}
    for name, encode in backends.items():
        encode(texts[:DEFAULT_BATCH_SIZE])  # warm up (first-run allocations, kernels)
        if name != "torch":
            vectors = encode(texts)
            queries = np.vstack([encode([q]) for q in questions])
            top5 = _top5(chunks, vectors, queries)
            same = sum(a == b for a, b in zip(top5, reference_top5, strict=True))
            out[f"{name}_top5_same"] = same == len(questions)
            out[f"{name}_top5_same_questions"] = same
            out[f"{name}_top1_same_questions"] = sum(
                a[0] == b[0] for a, b in zip(top5, reference_top5, strict=True))
            out[f"{name}_min_cosine"] = round(float((vectors * reference_vectors).sum(1).min()), 5)
    for _ in range(repeats):
        for name, encode in backends.items():
            t0, c0 = time.perf_counter(), time.process_time()
            encode(texts)
            wall[name].append(len(texts) / (time.perf_counter() - t0))
            cpu[name].append(len(texts) / max(time.process_time() - c0, 1e-9))
    out["torch_passages_per_s"] = round(statistics.median(wall["torch"]), 2)
    for name in backends:
        if name == "torch":
            continue
        out[f"{name}_passages_per_s"] = round(statistics.median(wall[name]), 2)
        out[f"embed_{name}_speed_ratio"] = round(statistics.median(
            a / b for a, b in zip(wall[name], wall["torch"], strict=True)), 2)
        out[f"embed_{name}_cpu_ratio"] = round(statistics.median(
            a / b for a, b in zip(cpu[name], cpu["torch"], strict=True)), 2)
    torch_embedder.unload()
    return out
