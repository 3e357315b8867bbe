"""Bad input, property-based (hypothesis): the inventory model and the modules refuse every
invalid inventory with INVALID_CONFIG lines naming the variable, never a traceback, and never
after a call to the control plane or the cluster.

An invalid inventory is a valid one (every variable set to a valid value) with one to three
variables broken by a generator that only makes values the model's rules refuse (a wrong type,
a value out of range, a malformed URL, image, pin, path, name or duration, a name with a
trailing newline, a missing required variable, an unknown variable), or with one rule across
variables broken. The properties:

- ``load`` raises ConfigError and nothing else; every line is ``INVALID_CONFIG: <bcd_*
  variable path>: <rule>``; each broken variable is named; the API key is never in a line.
- ``load`` on arbitrary values (valid or not) returns an Inventory or raises ConfigError.
- the modules that reach the control plane or the cluster fail with the same lines and open
  no network connection (every socket connect is recorded).

The counts are recorded in docs/reliability.md (tests/reliability/plugin.py).
"""

from __future__ import annotations

import re
import socket
import string
from contextlib import contextmanager

from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import (
    KNOWN_VARIABLES,
    ConfigError,
    Inventory,
    from_strings,
    load,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import DIGEST, TEMPLATE, run_module

API_KEY = "sk-live-reliability-4c1d9a77e0b2"
REQUIRED = ("bcd_control_plane_url", "bcd_tenant", "bcd_pool")
MASK = "*" * 8  # what no_log masking puts in place of a secret's text
LINE = re.compile(r"^INVALID_CONFIG: (?P<var>bcd_[a-z0-9_]+)(?:[.\[].*?)?: \S.*$", re.S)
SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                                         HealthCheck.data_too_large]}

VALID = {
    "bcd_image": f"registry.example.com/better-compute/bcd:0.1.0@sha256:{DIGEST}",
    "bcd_gateway_url": "https://gw.example.com:7443",
    "bcd_gateway_server_name": "gw.example.com",
    "bcd_site_id": "site_01",
    "bcd_control_plane_url": "https://compute.example.com/compute",
    "bcd_pins": {"serving_ca": "sha256/" + "A" * 43 + "=", "join_signing": "sha256/" + "B" * 43 + "=",
                 "join_encryption": "sha256/" + "C" * 43 + "="},
    "bcd_join_token_secret": {"name": "bcd-join", "key": "token"},
    "bcd_namespace": "bcd-system",
    "bcd_name": "bcd",
    "bcd_create_namespace": True,
    "bcd_node_selector": {"nvidia.com/gpu.present": "true"},
    "bcd_tolerations": [{"operator": "Exists"}],
    "bcd_priority_class_name": "system-node-critical",
    "bcd_image_pull_secrets": ["regcred"],
    "bcd_resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
    "bcd_host_units": False,
    "bcd_gpu_api": "device-plugin",
    "bcd_nvidia_runtime_class": "nvidia",
    "bcd_kubelet_credentials": "kubeadm",
    "bcd_container_runtime": "containerd",
    "bcd_nvidia_toolkit": "gpu-operator",
    "bcd_log_level": "info",
    "bcd_tenant": "tenant_01",
    "bcd_pool": "pool_01",
    "bcd_token_ttl": "1h",
    "bcd_token_max_uses": 3,
    "bcd_token_key": "key-1",
    "bcd_api_key": API_KEY,
    "bcd_control_plane_ca_file": "/etc/bcd/ca.pem",
    "bcd_kubeconfig": "/etc/bcd/kubeconfig",
    "bcd_kube_context": "admin@cluster",
    "bcd_control_plane_timeout": 120,
    "bcd_cluster_name": "gpu-cluster-1",
    "bcd_require_pod_security": False,
    "bcd_privileged_namespaces": ["kube-system"],
    "bcd_gpu_isolation_enforce": True,
    "bcd_gpu_stack_configure": True,
    "bcd_join_timeout": "10m",
    "bcd_rollout_timeout": 600,
    "bcd_render_out": "/tmp/bcd.json",
    "bcd_join_secret_out": "/tmp/bcd-join.json",
    "bcd_report_out": "/tmp/report.json",
    "bcd_node_roots": {"gpu-node-1": "/srv/nodes/gpu-node-1"},
    "bcd_node_name": "gpu-node-1",
    "bcd_foreign_gpu_resources": ["example.com/vgpu-*"],
    "bcd_toolkit_cve_waivers": [{"node": "gpu-node-1", "cve": "CVE-2025-23266", "until": "2027-01-31",
                                 "reason": "toolkit 1.17.8 rolls out with the next maintenance window"}],
    "bcd_rollout_canary": 1,
    "bcd_rollout_max_unavailable": "10%",
    "bcd_rollout_max_down": "10%",
    "bcd_rollout_rollback": True,
    "bcd_rollout_force": False,
    "bcd_rollout_gate_timeout": 300,
    "bcd_rollout_soak": "30s",
    "bcd_lock_ttl": "30m",
    "bcd_allow_node_loss": False,
    "bcd_rollout_all_at_once": False,
    "bcd_drift_allowed_paths": ['spec.template.metadata.annotations["example.com/team"]'],
}

# --- invalid values, variable by variable ------------------------------------------------------

text = st.text(max_size=40)


def _reads_as_json(s: str) -> bool:
    """Whether the survey conversion (bcd_model.from_strings) reads ``s`` as JSON, for a variable
    that takes a mapping or a list: "{}" is then an empty mapping, which may be valid."""
    return from_strings({"bcd_resources": s})[0]["bcd_resources"] is not s


def not_json_text(**kwargs) -> st.SearchStrategy[str]:
    """Text that is not JSON a survey string could give for a mapping or list variable."""
    return st.text(**kwargs).filter(lambda s: not _reads_as_json(s))


anything_but_str = st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), st.lists(st.integers(), max_size=3),
                             st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))
not_mapping = st.one_of(st.integers(), st.booleans(), st.lists(st.integers(), max_size=3), not_json_text(max_size=10))
not_list = st.one_of(st.integers(), st.booleans(), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
                     st.floats(allow_nan=False), not_json_text(max_size=8))
BOOL_WORDS = {"0", "off", "f", "false", "n", "no", "1", "on", "t", "true", "y", "yes"}
not_bool = st.one_of(
    text.filter(lambda s: s.strip().lower() not in BOOL_WORDS and s.lower() not in BOOL_WORDS),
    st.integers().filter(lambda i: i not in (0, 1)),
    st.floats(allow_nan=False).filter(lambda f: f not in (0.0, 1.0)),
    st.lists(st.booleans(), max_size=2), st.dictionaries(st.text(max_size=3), st.booleans(), max_size=1),
)
hexdigits = st.text("0123456789abcdef", min_size=64, max_size=64)


def with_newline(valid: str):
    """The valid value with a line break appended: a name, id or path must not end in one."""
    return st.sampled_from(["\n", "\r\n", "\n\n"]).map(lambda nl: valid + nl)


def_label = st.one_of(
    st.just(""), st.text(string.ascii_uppercase, min_size=1, max_size=10).map(lambda s: "a" + s),
    st.text(string.ascii_lowercase, min_size=64, max_size=80), st.sampled_from(["-a", "a-", "a_b", "a.b", "a b", "é"]),
    with_newline("bcd-system"), anything_but_str,
)
bad_subdomain = st.one_of(
    st.just(""), st.sampled_from(["A", "-a", "a..b", "a_b", "a b", ".a", "a.", "ä"]),
    st.text(string.ascii_lowercase, min_size=254, max_size=260), with_newline("nvidia"), anything_but_str,
)
bad_server_name = st.one_of(
    st.just(""), st.sampled_from(["-a", "a..b", "a_b", "a b", ".a", "a.", "ä"]),
    st.text(string.ascii_lowercase, min_size=254, max_size=260), with_newline("gw.example.com"), anything_but_str,
)
bad_id = st.one_of(
    st.just(""), st.sampled_from(["-x", "_x", ".x", "a b", "a/b", "a\tb", "ü"]),
    st.text(string.ascii_letters, min_size=129, max_size=140), with_newline("pool_01"), anything_but_str,
)


def bad_url():
    return st.one_of(
        st.sampled_from(["http://compute.example.com", "ftp://x.example.com", "https://", "https:///path",
                         "https://user:pw@h.example.com", "https://h.example.com/?q=1", "https://h.example.com/#f",
                         "https://h.example.com:99999", "https://h.example.com:port", "compute.example.com",
                         "//h.example.com", "https://[::1", "https://h.example.com:-1"]),
        text.filter(lambda s: not s.lower().startswith("https://")),
        st.builds(lambda h: f"http://{h}.example.com", st.text(string.ascii_lowercase, min_size=1, max_size=8)),
        with_newline("https://compute.example.com"),
        st.sampled_from(["https://compute.exa\nmple.com", "https://compute.example.com/a\tb", " https://compute.example.com"]),
        anything_but_str,
    )


bad_pin = st.one_of(
    st.just("sha256/" + "A" * 43), st.just("sha1/" + "A" * 43 + "="), st.just("sha256/" + "A" * 44 + "="),
    st.just("sha256/" + "*" * 43 + "="), st.just("sha256/" + "A" * 43 + "=\n"), text, anything_but_str,
)


def bad_duration(lo: int, hi: int):
    return st.one_of(
        st.integers(max_value=lo - 1), st.integers(min_value=hi + 1),
        st.integers(0, lo - 1).map(str),
        st.sampled_from(["abc", "1d", "5 m", "1h1h", "m", "-5m", "1.5h", "", " "]),
        st.builds(lambda h: f"{h}h", st.integers(min_value=hi // 3600 + 1, max_value=10**6)),
        st.booleans(), st.floats(allow_nan=False, allow_infinity=False), st.lists(st.integers(), max_size=2),
    )


def bad_path_value():
    return st.one_of(st.just(""), st.just("   "), st.just("/etc/bcd\0x"), anything_but_str.filter(lambda v: v is not None))


bad_host_paths = st.one_of(
    st.sampled_from(["cri", "containerd2", "", "gpu_operator"]),
    st.just({"files": ["relative/config.toml"]}), st.just({"dirs": ["/etc/kubernetes/x"]}), st.just({"files": []}),
    st.just({"files": [f"/etc/c{i}.toml" for i in range(9)]}), st.just({"files": ["/dev"]}),
    st.just({"files": ["/etc/a.toml", "/etc/a.toml"]}), st.just({"files": ["/etc/a/../b.toml"]}),
    st.just({"preset": "containerd", "files": ["/etc/x.toml"]}), st.just({"files": ["/etc/x.toml"], "other": 1}),
    st.just({"dirs": ["/var/lib/bcd"]}), st.just({"files": ["/etc/kubernetes/kubelet.conf"]}), st.integers(),
)

INVALID = {
    "bcd_image": st.one_of(
        text.filter(lambda s: "@sha256:" not in s),
        hexdigits.filter(lambda h: h != h.upper()).map(lambda h: "registry.example.com/bcd@sha256:" + h.upper()),
        st.text("0123456789abcdef", min_size=1, max_size=63).map(lambda h: "registry.example.com/bcd@sha256:" + h),
        hexdigits.map(lambda h: "Registry.Example.com/BCD@sha256:" + h),
        hexdigits.map(lambda h: "registry.example.com/bcd:bad tag@sha256:" + h),
        hexdigits.map(lambda h: f"registry.example.com/bcd@sha256:{h}\n"),
        anything_but_str,
    ),
    "bcd_gateway_url": bad_url(),
    "bcd_control_plane_url": bad_url(),
    "bcd_gateway_server_name": bad_server_name,
    "bcd_site_id": bad_id,
    "bcd_tenant": bad_id,
    "bcd_pool": bad_id,
    "bcd_pins": st.one_of(
        not_mapping,
        st.sampled_from(["serving_ca", "join_signing", "join_encryption"]).map(
            lambda k: {n: v for n, v in VALID["bcd_pins"].items() if n != k}),
        st.just({**VALID["bcd_pins"], "extra": "sha256/" + "D" * 43 + "="}),
        st.tuples(st.sampled_from(["serving_ca", "join_signing", "join_encryption"]), bad_pin).map(
            lambda kv: {**VALID["bcd_pins"], kv[0]: kv[1]}),
    ),
    "bcd_join_token_secret": st.one_of(
        not_mapping, bad_subdomain.map(lambda n: {"name": n}),
        st.sampled_from(["", "a b", "a/b", ".", "..", "ké"]).map(lambda k: {"key": k}),
        st.just({"name": "bcd-join", "other": 1}),
    ),
    "bcd_namespace": def_label,
    "bcd_name": def_label,
    "bcd_create_namespace": not_bool,
    "bcd_node_selector": st.one_of(
        st.integers(), st.lists(st.text(max_size=3), min_size=1, max_size=2), not_json_text(min_size=1, max_size=10),
        st.sampled_from(["", "a/b/c", "UPPER.example.com/x", "-x", "x" * 64, "a b"]).map(lambda k: {k: "v"}),
        st.one_of(st.integers(), st.lists(st.text(max_size=3), max_size=2), st.just("x" * 64), st.just("a b"),
                  st.just("v\n")).map(lambda v: {"nvidia.com/gpu.present": v}),
    ),
    "bcd_tolerations": st.one_of(
        not_list, st.just([{"operator": "Bogus"}]),
        st.just([{"key": "k", "effect": "Bogus"}]), st.just([{"key": "k", "operator": "Exists", "value": "v"}]),
        st.just([{"operator": "Equal"}]), st.just([{"key": "k", "value": "v", "tolerationSeconds": 5}]),
        st.just([{"operator": "Exists", "unknown": 1}]), st.just([{"key": "bad key!"}]), st.just([7]),
    ),
    "bcd_priority_class_name": bad_subdomain,
    "bcd_image_pull_secrets": st.one_of(not_list,
                                        bad_subdomain.map(lambda n: [n])),
    "bcd_resources": st.one_of(
        st.integers(), not_json_text(min_size=1, max_size=5), st.just({"requests": {"gpu": "1"}}),
        st.sampled_from(["abc", "1.2.3", "-1", "1Qi", ""]).map(lambda q: {"requests": {"cpu": q}}),
        st.just({"requests": {"memory": "1Gi"}, "limits": {"memory": "1Mi"}}), st.just({"unknown": {}}),
        st.just({"limits": [1]}), st.just({"requests": {"cpu": True}}),
    ),
    "bcd_host_units": not_bool,
    "bcd_gpu_api": st.one_of(text.filter(lambda s: s not in ("device-plugin", "dra")), anything_but_str),
    "bcd_nvidia_runtime_class": bad_subdomain,
    "bcd_kubelet_credentials": st.one_of(
        st.sampled_from(["kubeadm2", "k8s", "", "KUBEADM"]), st.just(7),
        st.just({"kubeconfig": "/etc/kubernetes/admin.conf", "certificate_dirs": ["/var/lib/kubelet/pki"]}),
        st.sampled_from(["/", "/etc", "/etc/kubernetes", "/var/lib/kubelet", "/var/lib/kubelet/pods", "relative"]).map(
            lambda d: {"kubeconfig": "/etc/kubernetes/kubelet.conf", "certificate_dirs": [d]}),
        st.just({"kubeconfig": "/etc/kubernetes/kubelet.conf", "certificate_dirs": []}),
        st.just({"kubeconfig": "/etc/kubernetes/kubelet.conf", "certificate_dirs": [f"/srv/p{i}" for i in range(5)]}),
        st.just({"kubeconfig": "kubelet.conf", "certificate_dirs": ["/var/lib/kubelet/pki"]}),
        st.just({"preset": "kubeadm", "kubeconfig": "/etc/kubernetes/kubelet.conf", "certificate_dirs": ["/srv/p"]}),
        st.just({"certificate_dirs": ["/var/lib/kubelet/pki"]}),
    ),
    "bcd_container_runtime": bad_host_paths,
    "bcd_nvidia_toolkit": bad_host_paths,
    "bcd_log_level": st.one_of(text.filter(lambda s: s not in ("debug", "info", "warn", "error")), anything_but_str),
    "bcd_token_ttl": bad_duration(60, 86400),
    "bcd_token_max_uses": st.one_of(st.integers(max_value=0), st.integers(min_value=10001),
                                    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: f != int(f)),
                                    st.sampled_from(["abc", "", "1e", "2.5"]), st.lists(st.integers(), max_size=2)),
    "bcd_token_key": st.one_of(st.just(""), st.text(min_size=129, max_size=140),
                               st.sampled_from(["a\nb", "a\tb", "\x00", "key\n"]), anything_but_str),
    "bcd_api_key": st.one_of(st.integers(), st.lists(st.text(max_size=3), max_size=2), st.booleans(),
                             st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2)),
    "bcd_control_plane_ca_file": bad_path_value(),
    "bcd_kubeconfig": bad_path_value(),
    "bcd_kube_context": anything_but_str,
    "bcd_control_plane_timeout": bad_duration(1, 7 * 86400),
    "bcd_cluster_name": st.one_of(st.just(""), st.text(string.ascii_lowercase, min_size=64, max_size=70),
                                  st.sampled_from(["-a", "a b", "a/b", "é", "a\n"]), anything_but_str),
    "bcd_require_pod_security": not_bool,
    "bcd_privileged_namespaces": st.one_of(not_list,
                                           def_label.filter(lambda v: isinstance(v, str)).map(lambda n: [n])),
    "bcd_gpu_isolation_enforce": not_bool,
    "bcd_gpu_stack_configure": not_bool,
    "bcd_join_timeout": bad_duration(1, 7 * 86400),
    "bcd_rollout_timeout": bad_duration(1, 7 * 86400),
    "bcd_render_out": bad_path_value(),
    "bcd_join_secret_out": bad_path_value(),
    "bcd_report_out": bad_path_value(),
    "bcd_node_roots": st.one_of(st.integers(), st.lists(st.text(max_size=3), min_size=1, max_size=2),
                                st.just({"Gpu_Node": "/srv/x"}), st.just({"gpu-node-1": ""}), st.just({"gpu-node-1": 5})),
    "bcd_node_name": bad_subdomain,
    "bcd_foreign_gpu_resources": st.one_of(
        not_list, st.sampled_from(["*", "gpu", "/gpu", "Example.com/gpu", "example.com/", "example.com/gpu/x",
                                   "example.com/-x", "a b/c", ""]).map(lambda r: [r]),
        st.just([5]), st.just(["example.com/gpu"] * 65),
    ),
    "bcd_toolkit_cve_waivers": st.one_of(
        not_list,
        st.sampled_from([
            {"node": "n", "cve": "CVE-2099-0001", "until": "2027-01-31", "reason": "r"},  # not in the table
            {"node": "n", "cve": "CVE-2025-23266", "until": "next week", "reason": "r"},
            {"node": "n", "cve": "CVE-2025-23266", "until": "2027-02-30", "reason": "r"},
            {"node": "n", "cve": "CVE-2025-23266", "until": "2027-01-31", "reason": ""},
            {"node": "", "cve": "CVE-2025-23266", "until": "2027-01-31", "reason": "r"},
            {"node": "n", "cve": "CVE-2025-23266", "until": "2027-01-31"},
            {"node": "n", "cve": "CVE-2025-23266", "until": "2027-01-31", "reason": "r", "extra": 1},
        ]).map(lambda w: [w]),
        st.just(["CVE-2025-23266"]),
    ),
    "bcd_rollout_canary": st.one_of(st.integers(max_value=-1), st.integers(min_value=10001), st.just("x"),
                                    st.lists(st.integers(), max_size=1)),
    "bcd_rollout_max_unavailable": st.one_of(st.integers(max_value=0), st.sampled_from(["0%", "101%", "abc", "", "5 %", "%"]),
                                             st.booleans(), st.floats(allow_nan=False), st.lists(st.integers(), max_size=1)),
    "bcd_rollout_max_down": st.one_of(st.integers(max_value=-1), st.sampled_from(["-1%", "101%", "abc", "", "5 %", "%"]),
                                      st.booleans(), st.floats(allow_nan=False), st.lists(st.integers(), max_size=1)),
    "bcd_rollout_rollback": not_bool,
    "bcd_rollout_force": not_bool,
    "bcd_rollout_gate_timeout": bad_duration(1, 7 * 86400),
    "bcd_rollout_soak": st.one_of(st.integers(max_value=-1), st.integers(min_value=3601),
                                  st.sampled_from(["abc", "1d", "5 m", "-5m", "1.5h", "", " ", "2h"]), st.booleans(),
                                  st.floats(allow_nan=False, allow_infinity=False), st.lists(st.integers(), max_size=2)),
    "bcd_lock_ttl": bad_duration(1, 7 * 86400),
    "bcd_release_confirm": st.one_of(st.sampled_from(["", "   ", "\t"]), st.integers(), st.lists(st.integers(), max_size=2)),
    "bcd_release_force": not_bool,
    "bcd_adopt_foreign_objects": not_bool,
    "bcd_allow_node_loss": not_bool,
    "bcd_rollout_all_at_once": not_bool,
    "bcd_drift_allowed_paths": st.one_of(
        not_list, st.sampled_from([["spec"], ["spec.template"], ["status.x"], ["spec.template.spec.volumes[a"], [5], [""],
                                   ["data"], [" spec.template.spec.hostPID"]])),
    "bcd_gpu_stack_force_conflicts": not_bool,
    "bcd_render_force": not_bool,
    "bcd_render_format": st.one_of(text.filter(lambda s: s not in ("json", "yaml")), anything_but_str),
    "bcd_release_restore_gpu_stack": not_bool,
    "bcd_release_host_state": not_bool,
    "bcd_audit_report_only": not_bool,
    "bcd_junit_out": bad_path_value(),
    "bcd_metrics_out": bad_path_value(),
    "bcd_rollout_cluster_waves": st.one_of(
        st.just([]), st.integers(min_value=1), st.sampled_from(["x", "50%"]),
        st.sampled_from([[0], ["101%"], ["0%"], [True], ["abc"], [1, "x"]])),
    "bcd_node_root": bad_path_value(),
    "bcd_join_encryption_jwk": st.one_of(
        st.just({"kty": "RSA", "n": "AQAB", "e": "AQAB"}), st.just({"kty": "EC", "crv": "P-256"}),
        st.just({"kty": "EC", "crv": "P-384", "x": "AA", "y": "AA"}), st.just("not a key"), st.integers(min_value=1),
        st.just([1]), st.just({"kty": "EC", "crv": "P-256", "x": "!!", "y": "!!"}),
    ),
}
MODEL_REQUIRED = ("bcd_image", "bcd_gateway_url", "bcd_site_id", "bcd_pins")


def test_every_variable_has_an_invalid_generator():
    """A new variable in the model must get a generator here (so the property covers it)."""
    missing = sorted(set(KNOWN_VARIABLES) - set(INVALID))
    assert not missing, f"add invalid-value generators for {missing}"
    Inventory.model_validate({k: v for k, v in VALID.items()})  # the base is valid
    load(VALID, REQUIRED)


@st.composite
def unknown_variable(draw):
    """A bcd_* name the model does not know: a typo of a known name, or another name."""
    known = draw(st.sampled_from(KNOWN_VARIABLES))
    how = draw(st.integers(0, 2))
    if how == 0:
        i = draw(st.integers(4, len(known) - 1))
        name = known[:i] + known[i + 1:]
    elif how == 1:
        name = known + draw(st.sampled_from(["s", "_x", "2"]))
    else:
        name = "bcd_" + draw(st.text(string.ascii_lowercase + "_", min_size=1, max_size=12))
    if name in KNOWN_VARIABLES:
        name += "_zz"
    return name


@st.composite
def invalid_inventory(draw, names: tuple[str, ...] | None = None):
    """(variables, the names of the variables broken). ``names``: break only these variables
    (or add an unknown one), for playbooks that validate only some (gpu-stack.yml, doctor.yml)."""
    inv = dict(VALID)
    kind = draw(st.integers(0, 19)) if names is None else draw(st.sampled_from([2, 3, 3, 3]))
    if kind == 0:  # rules across variables (reported when every variable is valid on its own)
        which = draw(st.integers(0, 2))
        if which == 0:
            inv["bcd_container_runtime"] = {"files": ["/etc/containerd/config.toml"]}
            inv["bcd_nvidia_toolkit"] = {"files": ["/etc/containerd/config.toml"]}
            return inv, {"bcd_nvidia_toolkit"}
        if which == 1:
            inv["bcd_container_runtime"] = {"files": ["/srv/kubelet.conf"]}
            inv["bcd_kubelet_credentials"] = {"kubeconfig": "/srv/kubelet.conf", "certificate_dirs": ["/srv/pki"]}
            return inv, {"bcd_container_runtime"}
        del inv["bcd_control_plane_url"]
        return inv, {"bcd_control_plane_url"}
    broken = set()
    if kind == 1:  # a missing required variable
        name = draw(st.sampled_from(MODEL_REQUIRED + REQUIRED))
        del inv[name]
        broken.add(name)
    elif kind == 2:  # an unknown variable
        name = draw(unknown_variable())
        inv[name] = draw(st.one_of(st.integers(), st.text(max_size=5), st.booleans()))
        broken.add(name)
    pool = sorted(names if names is not None else INVALID)
    chosen = draw(st.lists(st.sampled_from(pool), min_size=0 if broken else 1, max_size=3, unique=True))
    for name in chosen:
        inv[name] = draw(INVALID[name])
        broken.add(name)
    return inv, broken


def check_lines(lines: list[str], broken: set[str]) -> None:
    assert lines, "a ConfigError without lines"
    named = set()
    for line in lines:
        m = LINE.match(line)
        assert m, f"not an INVALID_CONFIG line naming a bcd_* variable: {line!r}"
        named.add(m["var"])
        assert API_KEY not in line, f"the API key is in {line!r}"
    assert broken <= named, f"broken {sorted(broken)} but the lines name {sorted(named)}: {lines}"


def check_unmasked(msg: str, variables: dict) -> None:
    """No no_log value (a character of a junk key, a stand-in's 0) was masked in the lines: the
    mask is there only where a generated value holds one (a pin of asterisks, echoed)."""
    assert MASK not in msg or MASK in repr(variables), f"a no_log value masked in the lines: {msg!r}"


INVALID_EXAMPLES = 10_000
counted = {"invalid": 0, "arbitrary": 0, "modules": 0, "accepted": 0}


def test_invalid_inventories_all_end_in_invalid_config_naming_the_variable(reliability):
    reliability.describe("Bad input", "invalid inventories through the model (load), in process", unit="inventories")
    counted["invalid"] = 0
    seen_vars: set[str] = set()

    @settings(max_examples=INVALID_EXAMPLES, **SETTINGS)
    @given(invalid_inventory())
    def prop(case):
        variables, broken = case
        counted["invalid"] += 1
        seen_vars.update(broken)
        try:
            load(variables, REQUIRED)
        except ConfigError as exc:
            check_lines(exc.lines, broken)
        else:
            raise AssertionError(f"accepted an invalid inventory; broken {sorted(broken)}: "
                                 f"{ {k: variables.get(k) for k in broken} }")

    prop()
    reliability.runs = counted["invalid"]
    reliability.result = "every one refused with INVALID_CONFIG lines naming each broken variable; no other exception"
    reliability.figures.update({"variables broken": len(seen_vars & set(KNOWN_VARIABLES))})
    assert counted["invalid"] >= INVALID_EXAMPLES


JSONISH = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)),
                       lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                       max_leaves=8)


def test_arbitrary_values_load_or_end_in_invalid_config(reliability):
    reliability.describe("Bad input", "arbitrary values (valid or not) for any variables, in process", unit="inventories")
    counted["arbitrary"] = counted["accepted"] = 0

    @settings(max_examples=1500, **SETTINGS)
    @given(st.dictionaries(st.sampled_from(KNOWN_VARIABLES), JSONISH, max_size=6))
    def prop(overrides):
        counted["arbitrary"] += 1
        variables = {**VALID, **overrides}
        try:
            load(variables, REQUIRED)
            counted["accepted"] += 1
        except ConfigError as exc:
            check_lines(exc.lines, set())

    prop()
    reliability.runs = counted["arbitrary"]
    reliability.result = "each either loaded or refused with INVALID_CONFIG lines; no other exception"
    reliability.figures.update({"accepted as valid": counted["accepted"], "refused": counted["arbitrary"] - counted["accepted"]})


@contextmanager
def no_network():
    """Record every attempt to open a network connection (and refuse it)."""
    attempts = []
    real_connect, real_create = socket.socket.connect, socket.create_connection

    def connect(self, address):
        attempts.append(address)
        raise OSError("network blocked by the test")

    def create_connection(address, *a, **kw):
        attempts.append(address)
        raise OSError("network blocked by the test")

    socket.socket.connect = connect
    socket.create_connection = create_connection
    try:
        yield attempts
    finally:
        socket.socket.connect, socket.create_connection = real_connect, real_create


def module_args(name: str, config: dict) -> dict:
    """The module's arguments as the playbooks pass them: the API key in its own option, and in
    ``config`` only as the empty stand-in lookup('bcd.kubernetes.bcd_inventory') passes for a non-string key."""
    args = {"config": {k: v for k, v in config.items() if k != "bcd_api_key"}}
    key = config.get("bcd_api_key")
    if key is not None and not isinstance(key, str):
        args["config"]["bcd_api_key"] = next((t() for t in (bool, int, float, list, dict) if type(key) is t), 0)
    elif name in ("bcd_preflight", "bcd_nodes_info", "bcd_join_token"):
        args["api_key"] = API_KEY
    if name == "bcd_join_token":
        args.update(cluster="c1", run="r1", max_uses=2)
    if name == "bcd_manifests":
        args.update(template=str(TEMPLATE), required=list(REQUIRED))
    return args


MODULES = ("bcd_manifests", "bcd_preflight", "bcd_nodes_info", "bcd_join_token")


def test_modules_refuse_invalid_inventories_before_any_connection(reliability):
    reliability.describe("Bad input", "invalid inventories through the modules (control plane, cluster, render), "
                         "network blocked and recorded", unit="module runs")
    counted["modules"] = 0

    @settings(max_examples=600, **SETTINGS)
    @given(invalid_inventory(), st.sampled_from(MODULES))
    def prop(case, name):
        variables, broken = case
        counted["modules"] += 1
        with no_network() as attempts:
            code, result = run_module(name, module_args(name, variables))
        assert attempts == [], f"{name} opened a connection: {attempts}"
        assert code == 1 and result.get("failed"), result
        lines = result["msg"].splitlines()
        check_lines(lines, broken)
        check_unmasked(result["msg"], variables)
        # ansible-core 2.22 and later: the module names its no_log values (the API key) in
        # _ansible_new_secrets, for the controller to mask wherever it shows a result; nowhere else
        returned = {k: v for k, v in result.items() if k != "_ansible_new_secrets"}
        assert "Traceback" not in str(returned) and API_KEY not in str(returned)

    prop()
    reliability.runs = counted["modules"]
    reliability.result = "every run failed with INVALID_CONFIG naming each broken variable; no connection attempted"
    reliability.figures.update({"modules": ", ".join(MODULES)})
