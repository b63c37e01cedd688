"""Small real model files and the fake Hub repos built from them, for hub tests.

GGUF files are written with the `gguf` package (real header, metadata, one tensor of
the requested size); safetensors with the format's own layout (8-byte header length,
JSON header, raw data), so the registry's validity checks read genuine files.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.fakes.hub_server import FakeHub

ROOT = Path(__file__).resolve().parents[2]


def make_gguf(path: Path, n_bytes: int, arch: str = "llama", seed: int = 0) -> Path:
    """A valid GGUF with one float32 tensor of about `n_bytes` random bytes."""
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(path.stem)
    writer.add_context_length(2048)
    n = max(n_bytes // 4, 1)
    data = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    writer.add_tensor("token_embd.weight", data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def make_safetensors(path: Path, n_bytes: int, seed: int = 0) -> Path:
    """A valid safetensors file with one float32 tensor of about `n_bytes`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = max(n_bytes // 4, 1)
    data = np.random.default_rng(seed).standard_normal(n).astype(np.float32).tobytes()
    header = json.dumps({
        "model.embed_tokens.weight": {"dtype": "F32", "shape": [n], "data_offsets": [0, len(data)]},
        "__metadata__": {"format": "mlx"},
    }).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        f.write(data)
    return path


def mlx_repo_files(folder: Path, weights_bytes: int = 64 * 1024) -> dict[str, Path | bytes]:
    """The files of a small MLX model repo (as mlx-community publishes them)."""
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
              "quantization": {"group_size": 64, "bits": 4}, "hidden_size": 64}
    return {
        "config.json": json.dumps(config).encode(),
        "tokenizer.json": json.dumps({"version": "1.0", "model": {"type": "BPE"}}).encode(),
        "tokenizer_config.json": b'{"chat_template": "{{ messages }}"}',
        "model.safetensors": make_safetensors(folder / "model.safetensors", weights_bytes),
        "README.md": b"# tiny mlx model\n",
        ".gitattributes": b"*.safetensors filter=lfs\n",
    }


GGUF_REPO = "acme/Tiny-Chat-GGUF"
VISION_REPO = "acme/Tiny-Vision-GGUF"
MLX_REPO = "mlx-community/Tiny-Chat-4bit"
GATED_REPO = "bigco/Gated-Model-GGUF"
EMBED_REPO = "acme/tiny-embed-GGUF"


def build_catalog(hub: FakeHub, folder: Path, big_bytes: int = 3 * 1024 * 1024) -> None:
    """A handful of repos covering every search and download path the tests need."""
    q4 = make_gguf(folder / "gguf" / "tiny-chat-Q4_K_M.gguf", big_bytes, seed=1)
    q8 = make_gguf(folder / "gguf" / "tiny-chat-Q8_0.gguf", 256 * 1024, seed=2)
    hub.add_repo(GGUF_REPO, {"tiny-chat-Q4_K_M.gguf": q4, "tiny-chat-Q8_0.gguf": q8,
                             "README.md": b"# tiny\n"},
                 downloads=5000, likes=10, library_name="gguf", tags=["gguf", "llama"],
                 last_modified="2025-03-01T00:00:00.000Z",
                 gguf={"total": 1_000_000, "architecture": "llama", "context_length": 2048})
    vis = make_gguf(folder / "vision" / "tiny-vl-Q4_K_M.gguf", 128 * 1024, seed=3)
    proj = make_gguf(folder / "vision" / "mmproj-tiny-vl-f16.gguf", 64 * 1024, arch="clip",
                     seed=4)
    hub.add_repo(VISION_REPO, {"tiny-vl-Q4_K_M.gguf": vis, "mmproj-tiny-vl-f16.gguf": proj},
                 downloads=300, likes=99, library_name="gguf", tags=["gguf", "gemma3"],
                 last_modified="2025-06-01T00:00:00.000Z", pipeline_tag="image-text-to-text",
                 gguf={"total": 2_000_000, "architecture": "gemma3"})
    hub.add_repo(MLX_REPO, mlx_repo_files(folder / "mlx"), downloads=1200, likes=5,
                 library_name="mlx", tags=["mlx", "safetensors", "llama"],
                 last_modified="2025-05-01T00:00:00.000Z", license="mit",
                 config={"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                         "quantization": {"group_size": 64, "bits": 4}})
    gated = make_gguf(folder / "gated" / "gated-Q4_0.gguf", 64 * 1024, seed=5)
    hub.add_repo(GATED_REPO, {"gated-Q4_0.gguf": gated}, downloads=10, likes=1,
                 library_name="gguf", tags=["gguf"], gated="manual", license="other")
    emb = make_gguf(folder / "embed" / "tiny-embed-f16.gguf", 32 * 1024, arch="bert", seed=6)
    hub.add_repo(EMBED_REPO, {"tiny-embed-f16.gguf": emb}, downloads=50, likes=2,
                 library_name="gguf", tags=["gguf"], pipeline_tag="feature-extraction")


def point_client_at(monkeypatch: pytest.MonkeyPatch, hub: FakeHub) -> None:
    """Send the real huggingface_hub client to the fake, online, without xet or a token."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(Path(os.environ["LLMDECK_HOME"]) / "hf-home"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH",
                        str(Path(os.environ["HF_HOME"]) / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH",
                        str(Path(os.environ["HF_HOME"]) / "stored_tokens"))


def subprocess_env(hub: FakeHub, **extra: str) -> dict[str, str]:
    """Environment for a child process that talks to the fake (repo root importable)."""
    env = dict(os.environ)
    env.update({
        "HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0", "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
    })
    env.pop("HF_TOKEN", None)
    env.update(extra)
    return env


PYTHON = sys.executable


@pytest.fixture(scope="module", name="catalog_files")
def catalog_files_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Model files built once per test module (GGUF writing is the slow part)."""
    return tmp_path_factory.mktemp("hub-files")


@pytest.fixture(name="fake_hub")
def fake_hub_fixture(catalog_files: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """A running fake Hub with the test catalog, and the real client pointed at it."""
    hub = FakeHub()
    build_catalog(hub, catalog_files)
    with hub:
        point_client_at(monkeypatch, hub)
        yield hub
