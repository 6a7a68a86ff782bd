"""Config validation: every error names the YAML path and line; check-config exits 2."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from exporter.config import yamlfile
from exporter.config.load import load_config, parse_config
from exporter.config.models import Config
from exporter.config.yamlfile import ConfigError, unwrap

EXAMPLE = Path(__file__).resolve().parent.parent / "config.example.yaml"


def all_keys(model: type[BaseModel]) -> set[str]:
    out: set[str] = set()
    for name, field in model.model_fields.items():
        out.add(name)
        for t in unwrap(field.annotation):
            for arg in typing.get_args(t) or (t,):
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    out |= all_keys(arg)
    return out


def errors(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "cfg.yaml")
    return info.value.messages


def check_config(
    tmp_path: Path, text: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "exporter", "check-config", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_issue_shape_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_API_KEY", "sk-test")
    cfg = parse_config(
        """
server: {listen_address: "0.0.0.0:9400", log_format: logfmt}
peak_windows:
  timezone: Asia/Shanghai
  windows: {evening: {start: "20:00", end: "23:00"}}
slo: {ttft_p95_seconds: 1.0, tpot_p95_seconds: 0.1}
engines:
  - {name: main, url: "http://127.0.0.1:8000/metrics", type: vllm, interval: 5s}
probes:
  - {name: chat, url: "http://127.0.0.1:8000/v1/chat/completions", model: m,
     api_key: {env: LLM_API_KEY}, profile: short, interval: 15s}
paths:
  interval: 30s
  carriers:
    telecom: [{name: sh-ct, host: ct-sh.example.net, region: shanghai}]
    unicom: [{name: bj-cu, host: cu-bj.example.net, region: beijing, protocol: tcp, port: 443}]
gpu: {enabled: true, interval: 1s}
"""
    )
    assert cfg.server.port == 9400 and cfg.server.host == "0.0.0.0"
    assert cfg.engines[0].interval == 5.0
    assert cfg.probes[0].api_key is not None and cfg.probes[0].api_key.value() == "sk-test"
    assert "sk-test" not in repr(cfg)
    assert cfg.paths is not None and cfg.paths.carriers["unicom"][0].tcp_port == 443
    assert cfg.paths.spacing == 0.2 and cfg.paths.burst == 20


def test_defaults_and_absent_sections() -> None:
    cfg = parse_config("")
    assert cfg.server.listen_address == "0.0.0.0:9400"
    assert cfg.peak_windows.timezone == "Asia/Shanghai"
    assert list(cfg.peak_windows.windows) == ["evening"]
    assert cfg.engines == [] and cfg.probes == [] and cfg.paths is None and cfg.gpu is None


def test_example_config_is_valid_and_covers_every_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_API_KEY", "sk-test")
    monkeypatch.setenv("ENGINE_TOKEN", "tok")
    text = EXAMPLE.read_text()
    parse_config(text, str(EXAMPLE))
    # Every key any model knows appears in the commented example.
    missing = sorted(k for k in all_keys(Config) if f"{k}:" not in text)
    assert not missing, f"config.example.yaml lacks keys: {missing}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "engines:\n  - name: a\n    url: http://x\n    intervall: 5s\n",
            "cfg.yaml: engines[0].intervall (line 4): unknown key 'intervall' (did you mean 'interval'?)",
        ),
        (
            "probes:\n  - name: p\n    url: http://x\n    model: m\n  - name: q\n    url: http://x\n"
            "    model: m\n    interval: fast\n",
            "cfg.yaml: probes[1].interval (line 8): expected a duration like 15s, got 'fast'",
        ),
        (
            "slo:\n  ttft_p95_seconds: abc\n",
            "cfg.yaml: slo.ttft_p95_seconds (line 2): input should be a valid number",
        ),
        (
            "gpu:\n  enabled: maybe\n",
            "cfg.yaml: gpu.enabled (line 2): input should be a valid boolean",
        ),
        (
            "peak_windows:\n  timezone: Asia/Shangai\n",
            "cfg.yaml: peak_windows.timezone (line 2): unknown timezone 'Asia/Shangai'",
        ),
        ("server: {listen_address: [1, 2}\n", "cfg.yaml (line 1, column"),
        (
            "probes:\n  - {name: p, url: 'http://x', model: m, api_key: sk-live-123}\n",
            "cfg.yaml: probes[0].api_key (line 2): secrets must be a reference",
        ),
        (
            "probes:\n  - {name: p, url: 'http://x', model: m, api_key: {env: LLE_TEST_UNSET_VAR}}\n",
            "cfg.yaml: probes[0].api_key (line 2): environment variable LLE_TEST_UNSET_VAR is not set",
        ),
        (
            "engines:\n  - {name: a, url: 'http://x', bearer_token: {file: /nonexistent/tok}}\n",
            "cfg.yaml: engines[0].bearer_token (line 2): cannot read secret file /nonexistent/tok",
        ),
        (
            "peak_windows:\n  windows:\n    evening: {start: 20:00, end: 23:00}\n",
            'cfg.yaml: peak_windows.windows.evening.start (line 3): expected a quoted time of day like "20:00", got 1200',
        ),
        (
            "engines:\n  - {name: a, url: 'ftp://x'}\n",
            "cfg.yaml: engines[0].url (line 2): expected an http:// or https:// URL",
        ),
        ("engines:\n  - {name: a}\n", "cfg.yaml: engines[0].url (line 2): required key is missing"),
        (
            "engines:\n  - {name: a, url: 'http://x'}\n  - {name: a, url: 'http://y'}\n",
            "cfg.yaml: engines (line 1): engine name 'a' is used twice",
        ),
        ("server:\n  listen_address: 9400\n", "cfg.yaml: server.listen_address (line 2)"),
        ("server:\n  port: 1\nserver:\n  port: 2\n", "cfg.yaml: server (line 3): duplicate key"),
        (
            "paths:\n  carriers:\n    telecom:\n      - {name: a, host: h, region: r, port: 80}\n",
            "cfg.yaml: paths.carriers.telecom[0] (line 4): port applies only to protocol: tcp",
        ),
        ("- just\n- a list\n", "cfg.yaml (line 1): expected a mapping of sections"),
        (
            "engines:\n  - {name: 'bad name', url: 'http://x'}\n",
            "cfg.yaml: engines[0].name (line 2): expected a name",
        ),
        (
            "paths:\n  spacing: 200\n  carriers: {}\n",
            "cfg.yaml: paths.spacing (line 2): expected a duration like 15s, got 200",
        ),
        (
            "alerting:\n  throttle_reasons: [hw_slowdown, overheated]\n",
            "cfg.yaml: alerting.throttle_reasons (line 2): unknown clock-event reason 'overheated'",
        ),
        (
            "alerting:\n  burn_windows:\n    - {long: 5m, short: 1h, factor: 14.4, hold: 2m}\n",
            "cfg.yaml: alerting.burn_windows[0] (line 3): short (60m) must be shorter than long (5m)",
        ),
        (
            "alerting:\n  burn_windows:\n    - {long: 1h, short: 90s, factor: 14.4, hold: 2m}\n",
            "cfg.yaml: alerting.burn_windows[0].short (line 3): expected whole minutes, got 90s",
        ),
        (
            "alerting:\n  receivers: {critical: default}\n",
            "cfg.yaml: alerting (line 1): receiver name 'default' is used twice",
        ),
        (
            "alerting:\n  receivers: {warn: chat}\n",
            "cfg.yaml: alerting.receivers.warn (line 2): unknown key 'warn' (did you mean 'warning'?)",
        ),
    ],
)
def test_error_names_path_and_line(text: str, expected: str) -> None:
    msgs = errors(text)
    assert any(m.startswith(expected) for m in msgs), msgs


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "engines:\n  - name: a\n    url: http://x\n    intervall: 5s\n",
            "engines[0].intervall (line 4): unknown key",
        ),
        ("gpu:\n  interval: 3\n", "gpu.interval (line 2): expected a duration like 15s, got 3"),
        ("server: {listen_address: [1, 2}\n", "(line 1, column 31): invalid YAML"),
        (
            "peak_windows: {timezone: Europe/Atlantis}\n",
            "peak_windows.timezone (line 1): unknown timezone 'Europe/Atlantis'",
        ),
    ],
    ids=["misspelled-key", "wrong-type", "broken-yaml", "unknown-timezone"],
)
def test_check_config_exits_2_with_one_line(tmp_path: Path, text: str, needle: str) -> None:
    proc = check_config(tmp_path, text)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0]
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_check_config_summary(tmp_path: Path) -> None:
    proc = check_config(
        tmp_path,
        "server: {listen_address: '127.0.0.1:9999'}\n"
        "peak_windows: {timezone: Europe/Berlin, windows: {evening: {start: '19:00', end: '22:30'},"
        " night: {start: '23:00', end: '01:00'}}}\n"
        "gpu: {interval: 2s}\n",
    )
    assert proc.returncode == 0, proc.stderr
    assert "valid" in proc.stdout
    assert "127.0.0.1:9999" in proc.stdout
    assert "Europe/Berlin: evening 19:00-22:30, night 23:00-01:00" in proc.stdout
    assert len(proc.stdout.splitlines()) < 40


def test_missing_file_is_a_clean_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", "check-config", str(tmp_path / "nope.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "cannot read config" in proc.stderr and "Traceback" not in proc.stderr


def test_secret_from_file(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    cfg = parse_config(
        f"engines:\n  - {{name: a, url: 'http://x', bearer_token: {{file: {token}}}}}\n"
    )
    ref = cfg.engines[0].bearer_token
    assert ref is not None and ref.value() == "s3cret"
    assert "s3cret" not in repr(cfg) and "s3cret" not in str(cfg.model_dump())


def test_relative_files_are_read_beside_the_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Installed as /etc/x/config.yaml with its files beside it, read from any directory.
    etc = tmp_path / "etc"
    (etc / "secrets").mkdir(parents=True)
    (etc / "secrets" / "token").write_text("s3cret\n")
    (etc / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    (etc / "config.yaml").write_text(
        "engines:\n  - {name: a, url: 'http://x', bearer_token: {file: secrets/token}}\n"
        "probes:\n  - {name: p, url: 'https://x/v1/chat/completions', model: m,"
        " ca_file: ca.pem}\n")
    monkeypatch.chdir(tmp_path)
    cfg = load_config(etc / "config.yaml")
    ref = cfg.engines[0].bearer_token
    assert ref is not None and ref.value() == "s3cret"
    assert cfg.probes[0].ca_file == str(etc / "ca.pem")
    (etc / "secrets" / "token").unlink()
    with pytest.raises(ConfigError, match=f"cannot read secret file {etc}/secrets/token"):
        load_config(etc / "config.yaml")


def test_durations() -> None:
    from exporter.config.values import parse_duration

    assert parse_duration("200ms") == pytest.approx(0.2)
    assert parse_duration("1m30s") == 90
    assert parse_duration("1.5h") == 5400
    for bad in ("", "5", "5 s", "s", "-1s", "0s", "1x"):
        with pytest.raises(Exception, match="duration"):
            parse_duration(bad)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("peak_windows:\n  windows:\n    evening: {start: '19:00', end: '23:00'}\n"
         "    late: {start: '22:00', end: '01:00'}\n",
         "cfg.yaml: peak_windows (line 1): windows evening and late overlap"),
        ("peak_windows:\n  windows:\n    night: {start: '23:00', end: '02:00'}\n"
         "    dawn: {start: '01:30', end: '03:00'}\n",
         "cfg.yaml: peak_windows (line 1): windows dawn and night overlap"),
        ("probes:\n  - {name: p, url: 'http://x', model: m, max_response_bytes: 99999999999}\n",
         "cfg.yaml: probes[0].max_response_bytes (line 2): input should be less than or equal to 268435456"),
    ],
    ids=["overlap", "overlap-across-midnight", "absurd-size"],
)
def test_refused_with_a_reason(text: str, needle: str) -> None:
    messages = errors(text)
    assert any(m.startswith(needle) for m in messages), messages


def test_adjacent_peak_windows_do_not_overlap() -> None:
    parse_config("peak_windows:\n  windows:\n    a: {start: '18:00', end: '20:00'}\n"
                 "    b: {start: '20:00', end: '23:00'}\n")


def test_min_baseline_fits_the_history_and_sets_the_baseline_step() -> None:
    assert errors("diagnosis: {history: 10m, min_baseline: 1h}\n") == [
        "cfg.yaml: diagnosis (line 1): expected interval < min_baseline <= history, "
        "got 5s, 60m, 10m"]
    # Unset, a history shorter than the default half hour only means no baselines.
    short = parse_config("diagnosis: {window: 30s, interval: 2s, history: 10m}\n").diagnosis
    assert (short.min_baseline, short.baseline_step) == (1800, 60)
    lab = parse_config("diagnosis: {window: 30s, interval: 2s, history: 10m, "
                       "min_baseline: 20s}\n").diagnosis
    assert lab.baseline_step == 2  # ten steps in the shortest baseline


@pytest.mark.parametrize("text", [
    EXAMPLE.read_text(encoding="utf-8"),
    "a: &x {b: [1, 2]}\nc: *x\nd:\n  <<: *x\n  e: 'f'\n",
    "a: [1, 2\n",  # unclosed: the same line and column from either parser
    "a: 1\na: 2\n",
])
def test_libyaml_and_the_python_parser_give_the_same_data_lines_and_errors(
        text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The config reader takes libyaml's parser where PyYAML has it, PyYAML's own where not:
    a user's file means the same under both, line numbers included, and a syntax error is
    placed alike (the two word the problem itself differently)."""
    assert yaml.__with_libyaml__  # the wheels carry libyaml, so the fast path is what runs

    def read() -> tuple[object, object]:
        try:
            return yamlfile.compose(text)
        except ConfigError as exc:
            return "error", [m.partition("invalid YAML")[0] for m in exc.messages]

    fast = read()
    monkeypatch.setattr(yamlfile, "Loader", yaml.SafeLoader)
    assert read() == fast
