"""The stub check (`python -m cohort.protogen --check`) compares what a stub means, not who wrote it.

A grpcio-tools other than the pinned one writes other version banners: the check passes. A changed
.proto changes the descriptors: the check fails and names the stub. Both against a copy of proto/.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from cohort.protogen import PROTO_ROOT, descriptor, stale_files

TOOL = "grpo/tool/v1/tool_service"


@pytest.fixture
def proto_copy(tmp_path) -> Path:
    root = tmp_path / "proto"
    shutil.copytree(PROTO_ROOT / "grpo", root / "grpo", ignore=shutil.ignore_patterns("__pycache__"))
    assert stale_files(root) == []
    return root


def test_committed_stubs_are_current():
    assert stale_files() == []


def test_other_generator_versions_pass(proto_copy):
    """Stubs written by another grpcio-tools / protobuf release (only the banners differ) are current."""
    grpc_stub = proto_copy / f"{TOOL}_pb2_grpc.py"
    pb2 = proto_copy / f"{TOOL}_pb2.py"
    text = grpc_stub.read_text()
    pin = re.compile(r"^GRPC_GENERATED_VERSION = .*$", re.M)
    assert re.search(r"^GRPC_GENERATED_VERSION = '[\d.]+'$", text, re.MULTILINE)
    grpc_stub.write_text(pin.sub("GRPC_GENERATED_VERSION = '1.99.7'", text))
    banner = re.compile(r"^# Protobuf Python Version: .*$", re.M)
    pb2.write_text(banner.sub("# Protobuf Python Version: 7.99.0", pb2.read_text()))
    assert stale_files(proto_copy) == []


def test_a_changed_proto_fails(proto_copy):
    """A field added to the contract without regenerating: the _pb2.py's descriptor (and its .pyi) differ."""
    proto = proto_copy / f"{TOOL}.proto"
    text = proto.read_text()
    assert "message ListToolsRequest {}" in text
    proto.write_text(text.replace("message ListToolsRequest {}", "message ListToolsRequest { string filter = 1; }"))
    assert stale_files(proto_copy) == [f"{TOOL}_pb2.py", f"{TOOL}_pb2.pyi"]


def test_a_hand_edited_service_stub_fails(proto_copy):
    grpc_stub = proto_copy / f"{TOOL}_pb2_grpc.py"
    grpc_stub.write_text(grpc_stub.read_text().replace("/grpo.tool.v1.ToolService/", "/grpo.tool.v2.ToolService/"))
    assert stale_files(proto_copy) == [f"{TOOL}_pb2_grpc.py"]


def test_descriptor_is_read_from_the_stub():
    d = descriptor((PROTO_ROOT / f"{TOOL}_pb2.py").read_text())
    assert d.name == f"{TOOL}.proto" and d.package == "grpo.tool.v1"
    assert "ToolService" in [s.name for s in d.service]
