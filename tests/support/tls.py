"""A pool's TLS credentials as dask's client configuration, as a user attaching by address sets it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def client_tls_settings(security: Any) -> dict[str, Any]:
    """dask config keys for a client that presents ``security``'s certificate (None: no keys)."""
    if security is None or not security.tls_client_cert:
        return {}
    return {
        "distributed.comm.tls.ca-file": security.tls_ca_file,
        "distributed.comm.tls.client.cert": security.tls_client_cert,
        "distributed.comm.tls.client.key": security.tls_client_key,
    }


def _variable(key: str) -> str:
    """dask's environment variable for a config key: DASK_DISTRIBUTED__COMM__TLS__CA_FILE."""
    return "DASK_" + "__".join(part.upper().replace("-", "_") for part in key.split("."))


@contextmanager
def client_tls_config(security: Any) -> Iterator[None]:
    """This process's dask config, and the environment of the processes it starts, hold
    ``security``'s client certificate while the block runs."""
    import dask

    settings = client_tls_settings(security)
    saved = {_variable(key): os.environ.get(_variable(key)) for key in settings}
    os.environ.update({_variable(key): str(value) for key, value in settings.items()})
    try:
        with dask.config.set(settings):
            yield
    finally:
        for variable, value in saved.items():
            if value is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = value
