"""`ray start` for the test cluster (tests/cluster/_ray_cluster.py) with every server of both nodes on 127.0.0.1.

Ray 2.60's `ray start --address` refuses to add a node unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER is true (on every
platform, despite the name), and with it true turns `--node-ip-address=127.0.0.1` into the machine's external
address: the GCS and raylets then listen on every interface and the agents on the external one. So the CLI process
passes its multi-node check with the flag set here, keeps the loopback address it is given, and the Ray processes
it starts see the variable's 0 (they read it at import): everything stays on loopback, as a capeval local Ray does
(engine/ray_local.py)."""

import sys

from ray._private import ray_constants, services
from ray.scripts.scripts import main

ray_constants.ENABLE_RAY_CLUSTER = True  # read by `ray start`'s worker-node check when it runs
services.resolve_ip_for_localhost = lambda host: host  # 127.0.0.1 stays 127.0.0.1

if __name__ == "__main__":
    sys.exit(main())
