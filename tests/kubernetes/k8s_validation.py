"""Validate generated manifests offline against real schemas.

- ``DaskCluster`` / ``DaskWorkerGroup``: the operator's own CRD schemas, shipped in the installed
  ``dask_kubernetes`` (its Helm chart's ``crds/``), made strict: a field the API server would prune
  silently (a typo, a field in the wrong place) is an error here, as with ``kubectl --validate=strict``.
- Everything the operator creates from them (scheduler Deployment and Service, worker Deployments),
  built by the operator's own functions (``dask_kubernetes.operator.controller``), against the
  Kubernetes OpenAPI JSON schemas that the ``kubernetes-validate`` package bundles (strict variant).
- Label keys/values and object names against Kubernetes' syntax rules.
"""

from __future__ import annotations

import copy
import re
from functools import cache
from importlib import resources
from typing import Any

import jsonschema
import yaml

KUBERNETES_VERSIONS = ("1.29", "1.37")  # the oldest still offered by the big clouds, and the newest bundled

_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _strict(schema: Any) -> Any:
    """Close every object schema that lists its properties (what the API server's pruning enforces)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@cache
def crd_validator(kind: str) -> jsonschema.protocols.Validator:
    path = resources.files("dask_kubernetes").joinpath(
        f"operator/deployment/helm/dask-kubernetes-operator/crds/{kind.lower()}.yaml"
    )
    crd = yaml.safe_load(path.read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata"})
    schema["properties"].update(
        apiVersion={"type": "string", "enum": ["kubernetes.dask.org/v1"]},
        kind={"type": "string", "enum": [crd["spec"]["names"]["kind"]]},
        metadata={"type": "object"},  # ObjectMeta: checked by check_metadata
    )
    schema["properties"].pop("status", None)  # written by the operator, never by us
    return jsonschema.Draft4Validator(schema)


@cache
def core_validator(kind: str, api_version: str, kubernetes_version: str) -> jsonschema.protocols.Validator:
    """The strict JSON schema of ``kind`` from kubernetes-validate, as its own ``validate()`` builds it."""
    import referencing
    from kubernetes_validate import utils

    version = [v for v in utils.all_versions() if utils.major_minor(v) == kubernetes_version][-1]
    schema_dir = f"kubernetes-json-schema/v{version}-local-strict"
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = utils.schema_contents(f"{schema_dir}/{kind.lower()}-{group}.json", version)
    definitions = utils.schema_contents(f"{schema_dir}/_definitions.json", version)
    registry = referencing.Resource.from_contents(schema) @ referencing.Registry()
    registry = referencing.Resource.from_contents(definitions) @ registry
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def errors_of(validator: jsonschema.protocols.Validator, obj: dict[str, Any]) -> list[str]:
    return [
        f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    ]


def check_labels(labels: dict[str, str], where: str) -> list[str]:
    problems = []
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if (prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix))) or not _LABEL_NAME.match(name):
            problems.append(f"{where}: label key {key!r} is not a valid Kubernetes label key")
        if not isinstance(value, str) or (value and not _LABEL_NAME.match(value)):
            problems.append(f"{where}: label {key}={value!r} is not a valid Kubernetes label value")
    return problems


def check_metadata(obj: dict[str, Any], namespace: str) -> list[str]:
    meta = obj.get("metadata", {})
    where = f"{obj.get('kind')} {meta.get('name')}"
    problems = check_labels(meta.get("labels", {}), where)
    if not _DNS_LABEL.match(meta.get("name", "")):
        problems.append(f"{where}: name is not a DNS-1123 label")
    if meta.get("namespace") != namespace:
        problems.append(f"{where}: namespace {meta.get('namespace')!r}, expected {namespace!r}")
    return problems


def operator_children(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the operator creates from our resources, built by the operator's own functions."""
    from dask_kubernetes.operator.controller import controller

    children = []
    for manifest in manifests:
        meta, spec = manifest["metadata"], manifest["spec"]
        namespace, labels = meta["namespace"], dict(meta.get("labels", {}))
        worker = spec["worker"]
        worker_labels = {**labels, **worker.get("metadata", {}).get("labels", {})}
        worker_annotations = dict(worker.get("metadata", {}).get("annotations", {}))
        if manifest["kind"] == "DaskCluster":
            name = meta["name"]
            scheduler = spec["scheduler"]
            scheduler_labels = {**labels, **scheduler.get("metadata", {}).get("labels", {})}
            children.append(controller.build_scheduler_deployment_spec(name, scheduler["spec"], {}, scheduler_labels))
            children.append(controller.build_scheduler_service_spec(name, scheduler["service"], {}, scheduler_labels))
            group, cluster = f"{name}-default", name
        else:
            group, cluster = meta["name"], spec["cluster"]
        children.append(
            controller.build_worker_deployment_spec(
                worker_group_name=group,
                namespace=namespace,
                cluster_name=cluster,
                uuid="0123456789",
                pod_spec=worker["spec"],
                annotations=worker_annotations,
                labels=worker_labels,
            )
        )
        for child in children:
            child["metadata"].setdefault("namespace", namespace)
    return children


def manifest_problems(manifests: list[dict[str, Any]], namespace: str) -> list[str]:
    """Every schema or syntax problem of the manifests and of what the operator makes of them."""
    problems: list[str] = []
    for manifest in manifests:
        where = f"{manifest['kind']} {manifest['metadata'].get('name')}"
        problems += [f"{where}: {e}" for e in errors_of(crd_validator(manifest["kind"]), manifest)]
        problems += check_metadata(manifest, namespace)
        worker_meta = manifest["spec"]["worker"].get("metadata", {})
        problems += check_labels(worker_meta.get("labels", {}), f"{where} worker template")
    for child in operator_children(manifests):
        where = f"{child['kind']} {child['metadata']['name']}"
        for version in KUBERNETES_VERSIONS:
            validator = core_validator(child["kind"], child["apiVersion"], version)
            problems += [f"{where} (Kubernetes {version}): {e}" for e in errors_of(validator, child)]
        problems += check_labels(child["metadata"].get("labels", {}), where)
    return problems
