"""What a log says about the job as a whole, gathered in the same pass that finds its incidents
(one cheap substring test per fact and line, bounded memory):

- whether it ran on an Ascend (NPU) host: signatures meant only for NPU hosts (a CUDA-only
  package imported there) need it;
- the network interfaces NCCL listed ("NET/Socket : Using [0]eth0:10.0.0.1<0> ..."), so a
  connection failure can say which of them other hosts cannot reach (docker bridges, veth links,
  IPv6 link-local addresses) and which one to pin;
- the collectives NCCL traced per process with NCCL_DEBUG=INFO ("AllReduce: opCount 3 ... count N
  datatype D ..."), so ranks that entered the same collective with different sizes or dtypes are
  found (they hang or fail far from the cause).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

_NPU = ("torch_npu", "Ascend", "ascend", "HCCL", "npu-smi", "mindspeed", "MindSpeed", "(PID:")
_IFACE = re.compile(r"\[(\d+)\]([A-Za-z][\w.\-@]*):([0-9A-Fa-f.:]+(?:%[\w.\-]+)?)<\d+>")
_COLL = re.compile(
    r"(?P<host>[\w.\-]+):(?P<pid>\d+):\d+ \[(?P<dev>\d+)\] NCCL INFO (?P<op>\w+): opCount (?P<opc>[0-9a-fA-F]+) "
    r"sendbuff \S+ recvbuff \S+ count (?P<count>\d+) datatype (?P<dt>\d+) op (?P<redop>\d+) root (?P<root>\d+) "
    r"comm \S+ \[nranks=(?P<n>\d+)\]"
)
# interface names of virtual links other hosts cannot reach: docker's bridges and veth pairs,
# libvirt, CNI/flannel/calico, loopback, VPN tunnels
_VIRTUAL = re.compile(
    r"^(?:docker\d*|br-[0-9a-f]+|veth\w*|virbr\d*|cni\d*|flannel[\w.]*|cali\w+|lo|tun\d*|tap\w*|vxlan\w*)$"
)
_COMPILED = re.compile(
    r"torch\.compile|compile\s*=\s*[Tt]rue|--(?![\w.]*no)[\w.]*compile(?:[= ](?:[Tt]rue|1))?\b|torch/_dynamo|torch\._dynamo|_orig_mod"
)
_GRAPH = re.compile(
    r"torch_npu/npu/graphs\.py|_graph_task_update|\baclgraph\b|ACL ?graph|NPUGraph|torch\.npu\.graph|torchair"
)
MAX_IFACES = 64
_SERVING = ("vllm", "vLLM", "sglang", "EngineCore")
_GRAPH_KEYS = ("raph", "torchair")
_COMPILE_KEYS = ("ompile", "_dynamo", "_orig_mod")
# every text Facts.feed looks for: a line with none of them tells it nothing (log_prefilter
# skims past such lines; tests/diagnose/test_log_prefilter.py checks feed asks for no other)
KEYS = (*_SERVING, *_GRAPH_KEYS, *_COMPILE_KEYS, *_NPU, "<0>", "opCount")
# the KEYS of the lines that, fed again with the same text, change the facts again (each NCCL
# trace line counts towards MAX_COLLECTIVES); the others tell nothing new the second time
AGAIN = ("opCount",)
MAX_COLLECTIVES = 4096


def classify_address(addr: str) -> str:
    """Why other hosts may not reach this address ("" when nothing is known against it)."""
    host = addr.split("%")[0].strip("[]")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return ""
    if ip.is_loopback:
        return "loopback"
    if ip.version == 6 and ip.is_link_local:
        return "ipv6_link_local"
    if ip.version == 4 and ip.is_link_local:
        return "ipv4_link_local"
    if ip.version == 4 and ip in ipaddress.ip_network("172.17.0.0/16"):
        return "docker_bridge"
    return ""


@dataclass
class Facts:
    npu: bool = False
    interfaces: dict[str, str] = field(default_factory=dict)  # name -> address, as NCCL listed them
    collectives: dict[tuple[int, int], dict[str, tuple]] = field(
        default_factory=dict
    )  # (opCount, nranks) -> proc -> call
    compiled: bool = False  # the job compiles its model (torch.compile, a compile flag, dynamo frames)
    serving: bool = False  # a serving engine's process printed in this log (vLLM / SGLang workers)
    graph_mode: bool = False  # NPU graph capture / replay is in use (torch_npu's graphs.py, ACL graph, torchair)
    _n_coll: int = 0

    def keys(self) -> tuple[str, ...]:
        """The KEYS a line could still change a fact with (a fact once found is not looked for)."""
        return (
            *(() if self.serving else _SERVING),
            *(() if self.graph_mode else _GRAPH_KEYS),
            *(() if self.compiled else _COMPILE_KEYS),
            *(() if self.npu else _NPU),
            *(("<0>",) if len(self.interfaces) < MAX_IFACES else ()),
            *(("opCount",) if self._n_coll < MAX_COLLECTIVES else ()),
        )

    def feed(self, text: str) -> None:
        if not self.serving and ("vllm" in text or "vLLM" in text or "sglang" in text or "EngineCore" in text):
            self.serving = True
        if not self.graph_mode and ("raph" in text or "torchair" in text):
            self.graph_mode = bool(_GRAPH.search(text))
        if not self.compiled and ("ompile" in text or "_dynamo" in text or "_orig_mod" in text):
            self.compiled = bool(_COMPILED.search(text))
        if not self.npu:
            for n in _NPU:
                if n in text:
                    self.npu = True
                    break
        if "<0>" in text and len(self.interfaces) < MAX_IFACES:
            for _, name, addr in _IFACE.findall(text):
                self.interfaces.setdefault(name, addr)
        if "opCount" in text and self._n_coll < MAX_COLLECTIVES:
            m = _COLL.search(text)
            if m:
                key = (int(m.group("opc"), 16), int(m.group("n")))
                proc = f"{m.group('host')} pid {m.group('pid')} (device {m.group('dev')})"
                call = (m.group("op"), int(m.group("count")), int(m.group("dt")), int(m.group("root")))
                self.collectives.setdefault(key, {}).setdefault(proc, call)
                self._n_coll += 1

    def virtual_interfaces(self) -> tuple[list[str], list[str]]:
        """(interfaces other hosts cannot reach, the others) among those NCCL listed."""
        virtual, real = [], []
        for name, addr in self.interfaces.items():
            bad = _VIRTUAL.match(name) or classify_address(addr) in ("ipv6_link_local", "loopback", "docker_bridge")
            (virtual if bad else real).append(name)
        return virtual, real

    def collective_mismatch(self) -> dict | None:
        """The first collective (lowest opCount) that processes entered with different
        operations, sizes, dtypes or roots: the calls and which processes made each."""
        for key in sorted(self.collectives):
            calls = self.collectives[key]
            if len(calls) < 2 or len(set(calls.values())) < 2:
                continue
            groups: dict[tuple, list[str]] = {}
            for proc, call in calls.items():
                groups.setdefault(call, []).append(proc)
            return {"opcount": key[0], "nranks": key[1], "groups": sorted(groups.items(), key=lambda g: len(g[1]))}
        return None
