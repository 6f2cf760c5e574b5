"""Kubernetes pools with the pool's own TLS credentials: a Secret mounted into the scheduler and every
worker, which then require the certificates; checked against the real schemas, offline."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml
from k8s_validation import (
    KUBERNETES_VERSIONS,
    check_metadata,
    core_validator,
    errors_of,
    manifest_problems,
    operator_children,
)

from gpugeek_jupyter.catalog import load_catalog
from gpugeek_jupyter.pools.credentials import create_pool_credentials
from gpugeek_jupyter.pools.k8s_manifest import (
    TLS_MOUNT_PATH,
    KubernetesOptions,
    build_manifests,
    build_tls_secret,
    scheduler_tls_address,
)
from gpugeek_jupyter.spec import PoolSpec
from gpugeek_jupyter.store import Registry

CATALOG = load_catalog()
TLS = KubernetesOptions(user="ada", dask_version="2026.8.0", tls=True)
SPEC = PoolSpec.create(
    gpu_type="A100-80GB", count=8, spot_fraction=0.5, backend="kubernetes", namespace="team-risk", name="risk"
)
TLS_OPTIONS = [
    "--protocol",
    "tls",
    "--tls-ca-file",
    f"{TLS_MOUNT_PATH}/ca.pem",
    "--tls-cert",
    f"{TLS_MOUNT_PATH}/cert.pem",
    "--tls-key",
    f"{TLS_MOUNT_PATH}/key.pem",
]


def _pods(manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    pods = {"scheduler": manifests[0]["spec"]["scheduler"]["spec"], "default": manifests[0]["spec"]["worker"]["spec"]}
    pods.update({m["metadata"]["name"]: m["spec"]["worker"]["spec"] for m in manifests[1:]})
    return pods


def _command(container: dict[str, Any]) -> str:
    return " ".join(container.get("command", []) + container.get("args", []))


def test_scheduler_and_every_worker_require_the_certificates_from_the_secret() -> None:
    pods = _pods(build_manifests(SPEC, CATALOG, TLS))
    assert set(pods) == {"scheduler", "default", "risk-spot"}
    for name, pod in pods.items():
        [container] = pod["containers"]
        assert " ".join(TLS_OPTIONS) in _command(container), name
        assert {"name": "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION", "value": "True"} in container["env"], name
        assert {"name": "gpugeek-tls", "mountPath": TLS_MOUNT_PATH, "readOnly": True} in container["volumeMounts"]
        assert {"name": "gpugeek-tls", "secret": {"secretName": "risk-tls", "defaultMode": 0o400}} in pod["volumes"]


def test_workers_reach_the_scheduler_by_its_tls_address_whatever_the_operator_sets() -> None:
    children = operator_children(build_manifests(SPEC, CATALOG, TLS))
    workers = [c for c in children if c["kind"] == "Deployment" and "worker" in c["metadata"]["name"]]
    assert len(workers) == 2
    for deployment in workers:
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        addresses = [e["value"] for e in container["env"] if e["name"] == "DASK_SCHEDULER_ADDRESS"]
        assert addresses == [scheduler_tls_address(SPEC)] == ["tls://risk-scheduler.team-risk.svc.cluster.local:8786"]


def test_tls_manifests_pass_the_operators_and_kubernetes_strict_schemas() -> None:
    assert manifest_problems(build_manifests(SPEC, CATALOG, TLS), "team-risk") == []


def test_without_tls_the_manifests_mount_no_secret() -> None:
    text = yaml.safe_dump_all(build_manifests(SPEC, CATALOG, KubernetesOptions(user="ada")))
    assert "gpugeek-tls" not in text and "--tls-cert" not in text


def test_the_secret_holds_the_pools_files_and_passes_the_schema(tmp_path: Path) -> None:
    credentials = create_pool_credentials(Registry(tmp_path / "gpugeek.sqlite"), 7, "risk")
    files = {p.name: p.read_bytes() for p in (credentials.ca_file, credentials.cert_file, credentials.key_file)}
    secret = build_tls_secret(SPEC, files, user="ada")
    assert (secret["kind"], secret["metadata"]["name"], secret["metadata"]["namespace"]) == (
        "Secret",
        "risk-tls",
        "team-risk",
    )
    assert {name: base64.b64decode(value) for name, value in secret["data"].items()} == files
    assert check_metadata(secret, "team-risk") == []
    for version in KUBERNETES_VERSIONS:
        assert errors_of(core_validator("Secret", "v1", version), secret) == [], version


def test_what_dry_run_prints_holds_no_key(tmp_path: Path) -> None:
    credentials = create_pool_credentials(Registry(tmp_path / "gpugeek.sqlite"), 7, "risk")
    printed = yaml.safe_dump_all(build_manifests(SPEC, CATALOG, TLS), sort_keys=False)
    assert "kind: Secret" not in printed and "PRIVATE KEY" not in printed
    key_lines = [line for line in credentials.key_file.read_text().splitlines() if not line.startswith("-----")]
    assert not any(line in printed for line in key_lines)


def test_the_launch_uses_tls_by_default_and_the_dry_run_names_the_secret_without_its_contents(
    monkeypatch: Any,
) -> None:
    from gpugeek_jupyter import config
    from gpugeek_jupyter.pools.k8s_manifest import manifests_for, render_manifests

    config.set_config(None)
    cluster = manifests_for(SPEC)[0]
    scheduler = cluster["spec"]["scheduler"]["spec"]["containers"][0]
    assert "--protocol" in scheduler["args"] and "tls" in scheduler["args"]
    text = render_manifests(SPEC)
    assert f"a Secret '{SPEC.name}-tls'" in text and "PRIVATE KEY" not in text
    assert "data:" not in text.split("---", 1)[0]
    monkeypatch.setenv("GPUGEEK_POOL_TLS", "0")
    config.set_config(None)
    plain = manifests_for(SPEC)[0]["spec"]["scheduler"]["spec"]["containers"][0]
    assert "--protocol" not in plain["args"] and "-tls'" not in render_manifests(SPEC)
    config.set_config(None)
