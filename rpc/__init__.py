"""The leaf package every part of Cohort shares: the gRPC server runtime (`runtime`), TLS credentials
and channels (`tls`), the one retry/failover policy of every client (`retry`), the one health probe
(`health`), and the local launcher that starts `cohort serve` processes (`launch`).

It imports only grpc and the standard library, never the services, the trainer or the CLI, so every
other package can import it without an import running back up (tests/test_import_layers.py).
"""
