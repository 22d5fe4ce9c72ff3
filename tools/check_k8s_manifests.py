#!/usr/bin/env python3
"""Checks the Kubernetes manifests in a directory (examples/kubernetes/).

Built-in kinds (ConfigMap, PersistentVolumeClaim, ...) are validated strictly
against Kubernetes' own OpenAPI schemas by kubernetes-validate (PyPI). The
MPIJob (kubeflow.org/v2beta1, a custom resource the validator has no schema
for) is checked against MPIJOB_SCHEMA below, the fields of the MPI Operator's
v2beta1 API this project uses or allows, and each of its pod templates is
validated as a core PodTemplate. Then what the parts must agree on: mpirun's
-np equals Worker replicas x slotsPerWorker, every ConfigMap and claim a pod
mounts is in the set, the --config file is a key of a ConfigMap mounted on
the workers, the config's /shared paths lie on a worker's mounts, and the
workers' /dev/shm is a memory volume.

Usage: check_k8s_manifests.py DIR OUT_JSON
Writes {"config": <the job's config text>, "config_path": ..., "command": [...]}
to OUT_JSON for the test to run; exits 1 naming every problem found.
"""
import json
import pathlib
import sys

import jsonschema
import kubernetes_validate
import yaml

K8S_VERSION = "1.35.0"  # the oldest the validator ships; the manifests use nothing newer

REPLICA_SCHEMA = {
    "type": "object",
    "required": ["template"],
    "additionalProperties": False,
    "properties": {
        "replicas": {"type": "integer", "minimum": 0},
        "restartPolicy": {"enum": ["Always", "OnFailure", "Never", "ExitCode"]},
        "template": {"type": "object"},
    },
}
MPIJOB_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kubeflow.org/v2beta1"},
        "kind": {"const": "MPIJob"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "required": ["mpiReplicaSpecs"],
            "additionalProperties": False,
            "properties": {
                "slotsPerWorker": {"type": "integer", "minimum": 1},
                "mpiImplementation": {"enum": ["OpenMPI", "Intel", "MPICH"]},
                "sshAuthMountPath": {"type": "string"},
                "launcherCreationPolicy": {"enum": ["AtStartup", "WaitForWorkersReady"]},
                "runLauncherAsWorker": {"type": "boolean"},
                "runPolicy": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "cleanPodPolicy": {"enum": ["None", "Running", "All"]},
                        "ttlSecondsAfterFinished": {"type": "integer", "minimum": 0},
                        "activeDeadlineSeconds": {"type": "integer", "minimum": 0},
                        "backoffLimit": {"type": "integer", "minimum": 0},
                        "suspend": {"type": "boolean"},
                        "schedulingPolicy": {"type": "object"},
                        "managedBy": {"type": "string"},
                    },
                },
                "mpiReplicaSpecs": {
                    "type": "object",
                    "required": ["Launcher", "Worker"],
                    "additionalProperties": False,
                    "properties": {
                        "Launcher": {**REPLICA_SCHEMA, "properties": {
                            **REPLICA_SCHEMA["properties"],
                            "replicas": {"const": 1}}},
                        "Worker": REPLICA_SCHEMA,
                    },
                },
            },
        },
    },
}


def where(doc):
    return f"{doc.get('kind', '?')} {doc.get('metadata', {}).get('name', '?')}"


def validate_builtin(doc, problems):
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        problems.append(f"{where(doc)}: {e.message} at {'.'.join(map(str, e.path))}")
    except kubernetes_validate.SchemaNotFoundError:
        problems.append(f"{where(doc)}: no Kubernetes {K8S_VERSION} schema for "
                        f"{doc.get('apiVersion')} {doc.get('kind')}")


def validate_mpijob(job, problems):
    for e in jsonschema.Draft7Validator(MPIJOB_SCHEMA).iter_errors(job):
        problems.append(f"{where(job)}: {e.message} at {'.'.join(map(str, e.path))}")
    for role, spec in job.get("spec", {}).get("mpiReplicaSpecs", {}).items():
        template = {"apiVersion": "v1", "kind": "PodTemplate",
                    "metadata": {"name": f"{job['metadata']['name']}-{role.lower()}"},
                    "template": spec.get("template", {})}
        validate_builtin(template, problems)


def pod_spec(job, role):
    return job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]


def mounted_volumes(spec):
    """{mountPath: volume} for the first container of a pod spec."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = spec["containers"][0].get("volumeMounts", [])
    return {m["mountPath"]: volumes.get(m["name"], {}) for m in mounts}


def on_a_mount(path, mounts):
    return any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounts)


def cross_check(job, by_kind, problems):
    """What the MPIJob, its pods and the other manifests must agree on."""
    spec = job["spec"]
    workers = spec["mpiReplicaSpecs"]["Worker"].get("replicas", 1)
    command = pod_spec(job, "Launcher")["containers"][0].get("command", [])
    if not command or command[0] != "mpirun" or "-np" not in command:
        problems.append("the launcher's command is not `mpirun -np N ...`")
        return None
    np_ = int(command[command.index("-np") + 1])
    if np_ != workers * spec.get("slotsPerWorker", 1):
        problems.append(f"mpirun -np {np_} != {workers} workers x {spec.get('slotsPerWorker', 1)} slots")
    for role in ("Launcher", "Worker"):
        for v in pod_spec(job, role).get("volumes", []):
            if "configMap" in v and v["configMap"]["name"] not in by_kind.get("ConfigMap", {}):
                problems.append(f"{role} mounts ConfigMap {v['configMap']['name']}, not in the set")
            claim = v.get("persistentVolumeClaim", {}).get("claimName")
            if claim and claim not in by_kind.get("PersistentVolumeClaim", {}):
                problems.append(f"{role} mounts claim {claim}, not in the set")
    mounts = mounted_volumes(pod_spec(job, "Worker"))
    if mounts.get("/dev/shm", {}).get("emptyDir", {}).get("medium") != "Memory":
        problems.append("the workers' /dev/shm is not an emptyDir of medium Memory")
    if "--config" not in command:
        problems.append("the launcher's command names no --config")
        return None
    config_path = command[command.index("--config") + 1]
    directory, key = config_path.rsplit("/", 1)
    volume = mounts.get(directory, {})
    config_map = by_kind.get("ConfigMap", {}).get(volume.get("configMap", {}).get("name"))
    if config_map is None or key not in config_map.get("data", {}):
        problems.append(f"--config {config_path} is no key of a ConfigMap mounted at {directory} on the workers")
        return None
    text = config_map["data"][key]
    config = json.loads(text)
    for name, path in (("data.train", config.get("data", {}).get("train", "")),
                       ("checkpoint.dir", config.get("checkpoint", {}).get("dir", "")),
                       ("telemetry.dir", config.get("telemetry", {}).get("dir", ""))):
        if path.startswith("/") and not on_a_mount(path, mounts):
            problems.append(f"{name} = {path} is on no volume the workers mount")
    return {"config": text, "config_path": config_path, "command": command}


def main():
    directory, out = pathlib.Path(sys.argv[1]), sys.argv[2]
    problems, by_kind, jobs = [], {}, []
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            by_kind.setdefault(doc.get("kind"), {})[doc.get("metadata", {}).get("name")] = doc
            if doc.get("kind") == "MPIJob":
                jobs.append(doc)
                validate_mpijob(doc, problems)
            else:
                validate_builtin(doc, problems)
    if len(jobs) != 1:
        problems.append(f"{len(jobs)} MPIJobs in {directory}, expected one")
    result = cross_check(jobs[0], by_kind, problems) if len(jobs) == 1 and not problems else None
    for p in problems:
        print(f"manifest problem: {p}")
    if problems or result is None:
        return 1
    pathlib.Path(out).write_text(json.dumps(result))
    print(f"{sum(len(v) for v in by_kind.values())} manifests valid (Kubernetes {K8S_VERSION} schemas, MPIJob v2beta1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
