"""The OpenTelemetry receiver the traces test exports to: `phoenix serve` (arize-phoenix from
PyPI) with its OTLP/gRPC receiver not started, so it listens on its loopback HTTP port alone
(Phoenix binds gRPC to every interface and has no setting for it). Spans arrive over OTLP/HTTP
at /v1/traces and are read back from its REST API.
"""
import sys

import phoenix.server.grpc_server as grpc_server

_init = grpc_server.GrpcServer.__init__


def _without_grpc(self, *args, **kwargs):
    kwargs["disabled"] = True
    _init(self, *args, **kwargs)


grpc_server.GrpcServer.__init__ = _without_grpc

from phoenix.server.main import main  # noqa: E402

sys.argv = ["phoenix", "serve", *sys.argv[1:]]
main()
