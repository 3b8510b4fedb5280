"""The inputs of a run, checked in seconds before anything slow starts (the model built, local services
started, rollout workers spawned): a missing model folder, a malformed dataset row and an unreachable or
misconfigured verifier endpoint are reported at once instead of minutes into the start-up.

``cohort train`` and ``cohort eval`` call :func:`check` first; every problem is a ``ValueError`` with one
line naming the input (they exit 2 with it). The run itself makes the same checks again where it uses the
inputs (the data is read again, the handshake repeated): this module only moves the first report forward.
"""

from __future__ import annotations

from pathlib import Path

from cohort.trainer.config import ModelSection, ScoringSection, TrainConfig

ENDPOINT_TIMEOUT_S = 5.0
"""Deadline of one endpoint's handshake here (the run's own handshake waits longer)."""


def check_model(cfg: ModelSection, flag: str | None = None) -> None:
    """``model.path`` (and ``model.tokenizer_path``) is a checkpoint folder (or a model in the Hugging Face
    cache); ``model.name`` a packaged model that is installed. ``flag``: how the user gave the path (``--model``)."""
    from cohort.trainer.gguf_models import NAMED_MODELS, cache_dir, gguf_path

    for key, folder in (("model.path", cfg.path), ("model.tokenizer_path", cfg.tokenizer_path)):
        if folder is None:
            continue
        where = flag if flag and key == "model.path" else key
        path = Path(folder).expanduser()
        if path.is_dir():
            if key == "model.path" and not (path / "config.json").is_file():
                raise ValueError(f"{where} {folder}: no config.json in that folder (not a transformers checkpoint "
                                 "folder; a run's trained model is RUN_DIR/final)")
            continue
        if path.exists():
            raise ValueError(f"{where} {folder}: not a folder (a transformers checkpoint folder is expected)")
        if not _in_hub_cache(folder):
            known = f"; packaged model names: {', '.join(NAMED_MODELS)}" if flag else ""
            raise ValueError(f"{where} {folder}: no such folder{known}")
    if cfg.name is not None:
        if cfg.name not in NAMED_MODELS:
            raise ValueError(f"unknown model.name {cfg.name!r}; known: {', '.join(NAMED_MODELS)} "
                             "(a checkpoint folder is model.path)")
        if not (cache_dir() / "models" / cfg.name / "config.json").exists():
            gguf_path(NAMED_MODELS[cfg.name])  # the package that ships it is installed


def _in_hub_cache(repo_id: str) -> bool:
    """A Hugging Face id (``org/model``) whose files are in the local cache (nothing is downloaded)."""
    if repo_id.count("/") != 1 or repo_id.startswith((".", "/", "~")):
        return False
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except ValueError:  # not a valid repository id
        return False


def check_data(cfg: TrainConfig, weighted: bool = True) -> int:
    """Every source read and parsed, every row routed to configured verifiers; the number of rows
    (``weighted``: mixed by the sources' weights, as training does; evaluation reads each row once)."""
    from cohort.trainer.data import load_examples
    from cohort.verifiers.records import RecordError, check_routes

    examples = load_examples(cfg.data, weighted)  # a bad row raises ValueError naming its file and line
    try:
        check_routes(examples, {v.name: (v.weight, v.options) for v in cfg.scoring.verifiers})
    except RecordError as exc:
        raise ValueError(f"data: {exc}") from None
    return len(examples)


def client_tls(cfg: ScoringSection) -> dict:
    """``{verifier: ClientTls | None}``, its files read now: a bad one raises ``cohort.rpc.tls.TlsError`` naming it.
    (Here, not in :mod:`cohort.trainer.scoring`, which imports torch: the endpoint check runs without it.)"""
    from cohort.rpc.tls import ClientTls

    return {v.name: None if v.tls is None else ClientTls.from_options(v.tls.ca, v.tls.cert, v.tls.key, v.tls.server_name)
            for v in cfg.verifiers}


def check_endpoints(cfg: TrainConfig, timeout_s: float = ENDPOINT_TIMEOUT_S) -> None:
    """Each verifier with endpoints is served at one of them at least (the client's handshake, its TLS
    included), and each tool server with endpoints answers a health check; a failure names its cause
    (:mod:`cohort.rpc.diagnose`)."""
    if any(v.endpoints for v in cfg.scoring.verifiers):
        from cohort.verifiers.blocking import BlockingClient
        from cohort.verifiers.client import HandshakeError, WeightedVerifier

        tls = client_tls(cfg.scoring)  # a bad certificate file: TlsError (a ValueError) naming it
        remote = [WeightedVerifier(v.name, 1.0, tuple(v.endpoints), tls=tls[v.name])
                  for v in cfg.scoring.verifiers if v.endpoints]

        client = BlockingClient(remote, timeout_s=timeout_s, retries=0)
        try:
            client.handshake(timeout_s)
        except HandshakeError as exc:
            raise ValueError(f"scoring: {exc}") from None
        finally:
            client.close()
    servers = [s.endpoints for s in cfg.rollout.tools if s.endpoints] if cfg.rollout.max_turns > 1 else []
    if servers:
        import grpc

        from cohort.rpc.diagnose import explain
        from cohort.rpc.health import health_status

        for endpoints in servers:
            problems = []
            for endpoint in endpoints:
                try:
                    health_status(endpoint, "", timeout_s)
                    break
                except grpc.RpcError as exc:
                    problems.append(f"{endpoint}: {explain(endpoint, exc.details() or '', None)}")
            else:
                raise ValueError("rollout.tools: no replica of a tool server answers: " + "; ".join(problems))


def check(cfg: TrainConfig, model_flag: str | None = None, weighted: bool = True) -> None:
    """The model, the endpoints, then the data. ``model_flag``: the option that gave ``model.path``."""
    check_model(cfg.model, model_flag)
    check_endpoints(cfg)
    check_data(cfg, weighted)
