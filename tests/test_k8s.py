"""deploy/k8s/ as a cluster would take it: every manifest valid against Kubernetes' API schemas
(kubernetes-validate, offline, strict: an unknown field is an error), no password in any of
them, and each container's command line one that `hpsearch` accepts. No cluster runs here."""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
import pytest
import yaml

from search.commands.cli import build_parser
from tests.helpers import REPO

K8S = REPO / "deploy" / "k8s"
VERSIONS = ("1.33.0", kubernetes_validate.latest_version())
"""A Kubernetes many clusters still run, and the newest the validator ships."""


def manifests() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in manifests() if d["kind"] == kind}


def containers() -> dict[str, dict[str, Any]]:
    found = {}
    for doc in manifests():
        if doc["kind"] in ("Deployment", "Job"):
            for container in doc["spec"]["template"]["spec"]["containers"]:
                found[doc["metadata"]["name"]] = container
    return found


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_for_kubernetes(version: str) -> None:
    docs = manifests()
    assert {(d["kind"], d["metadata"]["name"]) for d in docs} == {
        ("Secret", "hpsearch-db"),
        ("Job", "hpsearch-migrate"),
        ("Deployment", "hpsearch-worker"),
        ("Deployment", "hpsearch-dashboard"),
        ("Service", "hpsearch-dashboard"),
    }
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} on {version}: {exc.message}")


def test_no_manifest_holds_a_password() -> None:
    text = "\n".join(p.read_text() for p in K8S.glob("*.yaml"))
    # A URL with user:password@ anywhere, or a password given as a literal env value.
    assert not re.search(r"://[^/\s:@]+:[^/\s@]+@", text)
    for name, container in containers().items():
        for var in container.get("env", []):
            if "PASSWORD" in var["name"]:
                assert "value" not in var, (name, var["name"])
                assert var["valueFrom"]["secretKeyRef"]["name"] == "hpsearch-db-passwords"
    (secret,) = by_kind("Secret").values()
    assert not any("password" in key for key in {**secret.get("stringData", {})})
    assert "data" not in secret  # only the URLs, in the clear, and no password among them


def test_each_role_runs_as_itself_and_the_workers_can_stop_politely() -> None:
    found = containers()
    keys = {
        name: next(v for v in c["env"] if v["name"] == "HPSEARCH_STORAGE")["valueFrom"][
            "secretKeyRef"
        ]["key"]
        for name, c in found.items()
    }
    assert keys == {
        "hpsearch-migrate": "owner-url",
        "hpsearch-worker": "worker-url",
        "hpsearch-dashboard": "viewer-url",
    }
    worker_pod = by_kind("Deployment")["hpsearch-worker"]["spec"]["template"]["spec"]
    worker = found["hpsearch-worker"]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 1
    # SIGTERM, then time for a checkpoint before SIGKILL (the default, 30 s, is too short).
    assert worker_pod["terminationGracePeriodSeconds"] >= 120
    env = {v["name"]: v for v in worker["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    dashboard = found["hpsearch-dashboard"]
    assert dashboard["readinessProbe"]["httpGet"]["port"] == "http"
    assert dashboard["livenessProbe"]
    (service,) = by_kind("Service").values()
    assert service["spec"]["type"] == "ClusterIP"  # never exposed outside the cluster
    for container in found.values():
        assert container["resources"]["requests"] and container["resources"]["limits"]


def test_each_container_command_line_is_one_hpsearch_accepts() -> None:
    parser = build_parser()
    for name, container in containers().items():
        env = {v["name"]: v.get("value") for v in container["env"]}
        # Kubernetes expands $(VAR) from the container's own env before the process starts.
        args = [re.sub(r"\$\((\w+)\)", lambda m, env=env: env[m[1]], a) for a in container["args"]]
        parsed = parser.parse_args(args)
        assert (
            parsed.command
            == {
                "hpsearch-migrate": "migrate",
                "hpsearch-worker": "worker",
                "hpsearch-dashboard": "dashboard",
            }[name]
        )
    worker = parser.parse_args(
        [a.replace("$(HPSEARCH_STUDY)", "digits") for a in containers()["hpsearch-worker"]["args"]]
    )
    assert (worker.study, worker.gpus) == ("digits", "all")
    migrate = parser.parse_args(containers()["hpsearch-migrate"]["args"])
    assert migrate.create_roles and migrate.worker_role == "hpsearch_worker"
