"""``GpugeekConfig``: one table of environment variables, below config files and keyword arguments."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from gpugeek_jupyter.config import ENVIRONMENT, GpugeekConfig, environment_settings


def test_every_variable_sets_a_real_trait_and_is_named_in_its_help() -> None:
    traits = GpugeekConfig.class_traits(config=True)
    for name, variable in ENVIRONMENT.items():
        assert name in traits, name
        assert f"Env: {variable}" in traits[name].help, name


def test_variables_are_parsed_by_the_trait_type(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = environment_settings(
        {
            "GPUGEEK_HEARTBEAT": "0.5",
            "GPUGEEK_PRELOAD_TORCH": "0",
            "GPUGEEK_BACKEND": "kubernetes",
            "GPUGEEK_IDLE_TIMEOUT": "",
        }
    )
    assert settings == {"heartbeat_seconds": 0.5, "preload_torch": False, "default_backend": "kubernetes"}


def test_config_files_beat_variables_and_keywords_beat_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUGEEK_HEARTBEAT", "0.5")
    assert GpugeekConfig().heartbeat_seconds == 0.5
    from_file = Config({"GpugeekConfig": {"heartbeat_seconds": 3.0}})
    assert GpugeekConfig(config=from_file).heartbeat_seconds == 3.0
    assert GpugeekConfig(config=from_file, heartbeat_seconds=4.0).heartbeat_seconds == 4.0


def test_a_parent_app_config_reaches_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from traitlets.config import Application

    monkeypatch.setenv("GPUGEEK_BACKEND", "address")
    app = Application(config=Config({"GpugeekConfig": {"bind_host": "0.0.0.0"}}))
    config = GpugeekConfig(parent=app)
    assert (config.bind_host, config.default_backend) == ("0.0.0.0", "address")
