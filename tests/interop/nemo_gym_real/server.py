"""NeMo-Gym's own `equivalence_rule` resources server (nemo-gym 0.4.0's `EquivalenceRuleResourcesServer`, its
FastAPI app from their `setup_webserver`), on 127.0.0.1, for tests/interop/test_nemo_gym_real.py.

Run with the NeMo-Gym venv's Python (`scripts/ci-nemo-gym` makes `.venv-nemo`): ``python server.py PORT_FILE
[PORT]``. Their own entry point, ``run_webserver``, first reads a Hydra global config and starts Ray; this builds
the same server object and app (`setup_webserver`, `setup_liveness`, `setup_exception_middleware`, as
``run_webserver`` does) with a config given here, and serves it with uvicorn on a socket bound to loopback.
"""

import socket
import sys
from pathlib import Path

import uvicorn
from omegaconf import OmegaConf

from nemo_gym.config_types import BaseServerConfig
from nemo_gym.server_utils import ServerClient
from resources_servers.equivalence_rule.app import (EquivalenceRuleResourcesServer,
                                                    EquivalenceRuleResourcesServerConfig)


def main() -> None:
    port_file = Path(sys.argv[1])
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", int(sys.argv[2]) if len(sys.argv) > 2 else 0))
    port = sock.getsockname()[1]
    config = EquivalenceRuleResourcesServerConfig(host="127.0.0.1", port=port, entrypoint="app.py",
                                                  name="equivalence_rule")
    # no head server: this server calls no other NeMo-Gym server
    client = ServerClient(head_server_config=BaseServerConfig(host="127.0.0.1", port=1),
                          global_config_dict=OmegaConf.create({}))
    server = EquivalenceRuleResourcesServer(config=config, server_client=client)
    app = server.setup_webserver()
    server.setup_liveness(app)
    server.setup_exception_middleware(app)
    port_file.write_text(str(port))
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
