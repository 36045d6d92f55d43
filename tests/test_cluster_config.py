"""ray_cluster.yaml passes Ray's own cluster-config preparation and schema validation (what
`ray up` runs before it talks to the cloud), and keeps token auth consistent across nodes."""
import copy
from pathlib import Path

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

CONFIG = Path(__file__).resolve().parent.parent / "ray_cluster.yaml"


def test_ray_accepts_the_cluster_config():
    raw = yaml.safe_load(CONFIG.read_text())
    prepared = prepare_config(copy.deepcopy(raw))  # merges the provider's defaults, as `ray up` does
    validate_config(prepared)  # jsonschema against ray-schema.json plus Ray's own checks; raises on error
    types = prepared["available_node_types"]
    assert prepared["head_node_type"] == "head"
    assert {types["gpu-a100"]["node_config"]["InstanceType"], types["gpu-h100"]["node_config"]["InstanceType"]} == {
        "p4d.24xlarge", "p5.48xlarge"}


def test_setup_installs_the_project_and_every_ray_start_uses_token_auth():
    raw = yaml.safe_load(CONFIG.read_text())
    assert raw["file_mounts"]["~/ripple"] == "."
    assert raw["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    assert any("pip install" in c and "-e ~/ripple" in c for c in raw["setup_commands"])
    starts = [c for c in raw["head_start_ray_commands"] + raw["worker_start_ray_commands"] if "ray start" in c]
    assert len(starts) == 2 and all("RAY_AUTH_MODE=token" in c for c in starts)


def test_a_broken_config_is_rejected():
    raw = yaml.safe_load(CONFIG.read_text())
    raw["available_node_types"]["gpu-a100"]["max_wrokers"] = 4  # a typo Ray's schema must catch
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepare_config(raw))
