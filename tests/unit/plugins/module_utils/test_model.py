"""The inventory model: one test per refusal rule of seed 000, and normalisation."""

from __future__ import annotations

import pytest
from ansible_collections.bcd.kubernetes.plugins.module_utils import bcd_model
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_model import ConfigError, load
from cryptography.hazmat.primitives.asymmetric import ec

from tests.helpers import base_vars


def _jwk(private: bool = False) -> tuple[dict, str]:
    import base64

    from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_pins import pin_of_jwk

    key = ec.generate_private_key(ec.SECP256R1())
    nums = key.private_numbers()

    def b64(n: int) -> str:
        return base64.urlsafe_b64encode(n.to_bytes(32, "big")).rstrip(b"=").decode()

    jwk = {"kty": "EC", "crv": "P-256", "x": b64(nums.public_numbers.x), "y": b64(nums.public_numbers.y), "use": "enc", "kid": "k1"}
    pin = pin_of_jwk(jwk)
    if private:
        jwk["d"] = b64(nums.private_value)
    return jwk, pin


def refused(**overrides) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(base_vars(**overrides))
    lines = info.value.lines
    assert lines and all(line.startswith("INVALID_CONFIG: ") for line in lines)
    return lines


def assert_names(lines: list[str], path: str, *words: str) -> None:
    hits = [line for line in lines if line.startswith(f"INVALID_CONFIG: {path}:")]
    assert hits, f"no line names {path}: {lines}"
    for word in words:
        assert any(word in h for h in hits), f"{word!r} not in {hits}"


GOOD_PIN = "sha256/" + "D" * 43 + "="

RULES = [
    # (id, overrides, variable path, words the message must hold)
    ("image-no-digest", {"bcd_image": "registry.example.com/bcd:0.1.0"}, "bcd_image", ["digest"]),
    ("image-short-digest", {"bcd_image": "registry.example.com/bcd@sha256:abc"}, "bcd_image", ["sha256"]),
    ("image-upper-hex", {"bcd_image": "registry.example.com/bcd@sha256:" + "A" * 64}, "bcd_image", ["hex"]),
    ("image-bad-registry", {"bcd_image": "reg_istry.example.com:x/bcd@sha256:" + "a" * 64}, "bcd_image", []),
    ("gateway-http", {"bcd_gateway_url": "http://gw.example.com"}, "bcd_gateway_url", ["https"]),
    ("gateway-userinfo", {"bcd_gateway_url": "https://u:p@gw.example.com"}, "bcd_gateway_url", ["user"]),
    ("control-plane-http", {"bcd_control_plane_url": "http://compute.example.com"}, "bcd_control_plane_url", ["https"]),
    ("control-plane-query", {"bcd_control_plane_url": "https://c.example.com/?x=1"}, "bcd_control_plane_url", ["query"]),
    ("pin-not-sha256", {"bcd_pins": {"serving_ca": "sha1/" + "A" * 43 + "=", "join_signing": GOOD_PIN, "join_encryption": GOOD_PIN}}, "bcd_pins.serving_ca", ["pin"]),
    ("pin-short", {"bcd_pins": {"serving_ca": GOOD_PIN, "join_signing": "sha256/AAAA", "join_encryption": GOOD_PIN}}, "bcd_pins.join_signing", ["pin"]),
    ("pin-no-padding", {"bcd_pins": {"serving_ca": GOOD_PIN, "join_signing": GOOD_PIN, "join_encryption": "sha256/" + "A" * 44}}, "bcd_pins.join_encryption", ["pin"]),
    ("pin-missing", {"bcd_pins": {"serving_ca": GOOD_PIN, "join_signing": GOOD_PIN}}, "bcd_pins.join_encryption", ["required"]),
    ("pin-unknown-key", {"bcd_pins": {"serving_ca": GOOD_PIN, "join_signing": GOOD_PIN, "join_encryption": GOOD_PIN, "gateway": GOOD_PIN}}, "bcd_pins.gateway", ["unknown"]),
    ("namespace-dns1123", {"bcd_namespace": "BCD_System"}, "bcd_namespace", ["DNS-1123"]),
    ("namespace-too-long", {"bcd_namespace": "a" * 64}, "bcd_namespace", ["63"]),
    ("name-dns1123", {"bcd_name": "bcd.daemon"}, "bcd_name", ["DNS-1123"]),
    ("secret-name", {"bcd_join_token_secret": {"name": "Bcd_Join"}}, "bcd_join_token_secret.name", ["DNS-1123"]),
    ("secret-key", {"bcd_join_token_secret": {"name": "bcd-join", "key": "tok en"}}, "bcd_join_token_secret.key", ["Secret key"]),
    ("priority-class", {"bcd_priority_class_name": "System Node Critical"}, "bcd_priority_class_name", ["DNS-1123"]),
    ("runtime-class", {"bcd_nvidia_runtime_class": "NVIDIA"}, "bcd_nvidia_runtime_class", ["DNS-1123"]),
    ("pull-secret", {"bcd_image_pull_secrets": ["ok", "Not_OK"]}, "bcd_image_pull_secrets", ["DNS-1123"]),
    ("selector-key", {"bcd_node_selector": {"nvidia.com/gpu present": "true"}}, "bcd_node_selector", ["label key"]),
    ("selector-prefix", {"bcd_node_selector": {"NVIDIA.com/gpu": "true"}}, "bcd_node_selector", ["prefix"]),
    ("selector-value", {"bcd_node_selector": {"nvidia.com/gpu.present": "yes please"}}, "bcd_node_selector", ["label value"]),
    ("selector-not-mapping", {"bcd_node_selector": "nvidia.com/gpu.present=true"}, "bcd_node_selector", ["mapping"]),
    ("toleration-key", {"bcd_tolerations": [{"key": "bad key", "operator": "Exists"}]}, "bcd_tolerations[0]", ["label key"]),
    ("toleration-exists-value", {"bcd_tolerations": [{"key": "a", "operator": "Exists", "value": "b"}]}, "bcd_tolerations[0]", ["Exists"]),
    ("toleration-seconds", {"bcd_tolerations": [{"operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]}, "bcd_tolerations[0]", ["NoExecute"]),
    ("toleration-effect", {"bcd_tolerations": [{"operator": "Exists", "effect": "Never"}]}, "bcd_tolerations[0].effect", ["NoSchedule"]),
    ("quantity-malformed", {"bcd_resources": {"requests": {"cpu": "100 m"}}}, "bcd_resources.requests", ["quantity"]),
    ("quantity-unit", {"bcd_resources": {"limits": {"memory": "512MB"}}}, "bcd_resources.limits", ["quantity"]),
    ("quantity-negative", {"bcd_resources": {"requests": {"cpu": "-1"}}}, "bcd_resources.requests", ["negative"]),
    ("quantity-resource-name", {"bcd_resources": {"limits": {"nvidia.com/gpu": "1"}}}, "bcd_resources.limits", ["resource"]),
    ("quantity-request-over-limit", {"bcd_resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "512Mi"}}}, "bcd_resources", ["exceeds"]),
    ("gpu-api", {"bcd_gpu_api": "cuda"}, "bcd_gpu_api", ["device-plugin", "dra"]),
    ("log-level", {"bcd_log_level": "verbose"}, "bcd_log_level", ["info"]),
    ("kubelet-preset", {"bcd_kubelet_credentials": "microk8s"}, "bcd_kubelet_credentials", ["preset", "kubeadm"]),
    ("runtime-preset", {"bcd_container_runtime": "docker"}, "bcd_container_runtime", ["preset", "cri-o"]),
    ("toolkit-preset", {"bcd_nvidia_toolkit": "operator"}, "bcd_nvidia_toolkit", ["preset", "gpu-operator"]),
    ("kubeconfig-relative", {"bcd_kubelet_credentials": {"kubeconfig": "etc/kubelet.conf", "certificate_dirs": ["/var/lib/kubelet/pki"]}}, "bcd_kubelet_credentials.kubeconfig", ["absolute"]),
    ("kubeconfig-admin", {"bcd_kubelet_credentials": {"kubeconfig": "/etc/kubernetes/admin.conf", "certificate_dirs": ["/var/lib/kubelet/pki"]}}, "bcd_kubelet_credentials.kubeconfig", ["control-plane"]),
    ("cert-dirs-none", {"bcd_kubelet_credentials": {"kubeconfig": "/etc/kubernetes/kubelet.conf", "certificate_dirs": []}}, "bcd_kubelet_credentials.certificate_dirs", ["at least 1"]),
    ("cert-dirs-five", {"bcd_kubelet_credentials": {"kubeconfig": "/etc/kubernetes/kubelet.conf", "certificate_dirs": [f"/opt/pki{i}" for i in range(5)]}}, "bcd_kubelet_credentials.certificate_dirs", ["at most 4"]),
    ("cert-dir-relative", {"bcd_kubelet_credentials": {"kubeconfig": "/etc/kubernetes/kubelet.conf", "certificate_dirs": ["pki"]}}, "bcd_kubelet_credentials.certificate_dirs", ["absolute"]),
    ("cert-dir-dotdot", {"bcd_kubelet_credentials": {"kubeconfig": "/etc/kubernetes/kubelet.conf", "certificate_dirs": ["/var/lib/kubelet/pki/../pods"]}}, "bcd_kubelet_credentials.certificate_dirs", ["normalised"]),
    ("runtime-relative", {"bcd_container_runtime": {"files": ["etc/containerd/config.toml"]}}, "bcd_container_runtime.files", ["absolute"]),
    ("toolkit-relative", {"bcd_nvidia_toolkit": {"dirs": ["nvidia/toolkit"]}}, "bcd_nvidia_toolkit.dirs", ["absolute"]),
    ("runtime-none", {"bcd_container_runtime": {"files": [], "dirs": []}}, "bcd_container_runtime", ["1 to 8"]),
    ("runtime-nine", {"bcd_container_runtime": {"files": [f"/etc/containerd/c{i}.toml" for i in range(5)], "dirs": [f"/etc/containerd/d{i}" for i in range(4)]}}, "bcd_container_runtime", ["1 to 8"]),
    ("toolkit-nine", {"bcd_nvidia_toolkit": {"dirs": [f"/opt/nvidia/t{i}" for i in range(9)]}}, "bcd_nvidia_toolkit", ["1 to 8"]),
    ("runtime-twice", {"bcd_container_runtime": {"files": ["/etc/containerd/config.toml"], "dirs": ["/etc/containerd/config.toml"]}}, "bcd_container_runtime", ["twice"]),
    ("runtime-under-kubelet", {"bcd_container_runtime": {"dirs": ["/var/lib/kubelet/pods"]}}, "bcd_container_runtime.dirs", ["/var/lib/kubelet"]),
    ("runtime-holds-etc-kubernetes", {"bcd_container_runtime": {"dirs": ["/etc"]}}, "bcd_container_runtime.dirs", ["/etc/kubernetes"]),
    ("toolkit-root", {"bcd_nvidia_toolkit": {"dirs": ["/"]}}, "bcd_nvidia_toolkit.dirs", ["never mounted"]),
    ("toolkit-fixed-mount", {"bcd_nvidia_toolkit": {"dirs": ["/etc/cdi"]}}, "bcd_nvidia_toolkit.dirs", ["already a mount"]),
    ("path-in-both", {"bcd_container_runtime": {"files": ["/etc/containerd/config.toml"], "dirs": ["/etc/nvidia-container-runtime"]}, "bcd_nvidia_toolkit": "packages"}, "bcd_nvidia_toolkit", ["also named by bcd_container_runtime"]),
    ("ttl-short", {"bcd_token_ttl": "30s"}, "bcd_token_ttl", ["1 minute to 24 hours"]),
    ("ttl-long", {"bcd_token_ttl": "25h"}, "bcd_token_ttl", ["1 minute to 24 hours"]),
    ("ttl-malformed", {"bcd_token_ttl": "an hour"}, "bcd_token_ttl", ["duration"]),
    ("max-uses-zero", {"bcd_token_max_uses": 0}, "bcd_token_max_uses", ["greater than or equal to 1"]),
    ("max-uses-huge", {"bcd_token_max_uses": 10001}, "bcd_token_max_uses", ["less than or equal to 10000"]),
    ("token-key-long", {"bcd_token_key": "k" * 129}, "bcd_token_key", ["at most 128"]),
    ("unknown-variable", {"bcd_namesapce": "x"}, "bcd_namesapce", ["unknown variable", "bcd_namespace"]),
    ("unknown-nested-key", {"bcd_join_token_secret": {"name": "bcd-join", "keys": "token"}}, "bcd_join_token_secret.keys", ["unknown key"]),
    ("wrong-type-bool", {"bcd_host_units": "maybe"}, "bcd_host_units", ["true or false"]),
    ("max-unavailable", {"bcd_rollout_max_unavailable": "150%"}, "bcd_rollout_max_unavailable", ["percentage"]),
    ("max-down", {"bcd_rollout_max_down": "150%"}, "bcd_rollout_max_down", ["percentage", "count (0 or more)"]),
    ("max-down-negative", {"bcd_rollout_max_down": -1}, "bcd_rollout_max_down", ["0 or more"]),
]


@pytest.mark.parametrize(("overrides", "path", "words"), [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_refusal_rule(overrides, path, words):
    assert_names(refused(**overrides), path, *words)


@pytest.mark.parametrize("bad_dir", ["/", "/etc", "/etc/kubernetes", "/etc/kubernetes/pki", "/var", "/var/lib",
                                     "/var/lib/kubelet", "/var/lib/kubelet/pods", "/var/lib/kubelet/plugins"])
def test_kubelet_certificate_dir_holding_more_than_the_kubelets_is_refused(bad_dir):
    lines = refused(bcd_kubelet_credentials={"kubeconfig": "/etc/kubernetes/kubelet.conf", "certificate_dirs": [bad_dir]})
    assert_names(lines, "bcd_kubelet_credentials.certificate_dirs", "holds more than the kubelet's certificates")


@pytest.mark.parametrize("good_dir", ["/var/lib/kubelet/pki", "/var/lib/kubelet/pki/current", "/var/lib/rancher/k3s/agent", "/opt/kubelet/pki"])
def test_kubelet_certificate_dirs_that_hold_only_the_kubelets_are_accepted(good_dir):
    inv = load(base_vars(bcd_kubelet_credentials={"kubeconfig": "/etc/kubernetes/kubelet.conf", "certificate_dirs": [good_dir]}))
    assert inv.bcd_kubelet_credentials.certificate_dirs == [good_dir]


def test_one_of_control_plane_url_or_jwk_is_required():
    assert_names(refused(bcd_control_plane_url=None), "bcd_control_plane_url", "one is required")


def test_jwk_with_private_part_is_refused():
    jwk, pin = _jwk(private=True)
    pins = dict(base_vars()["bcd_pins"], join_encryption=pin)
    assert_names(refused(bcd_join_encryption_jwk=jwk, bcd_pins=pins), "bcd_join_encryption_jwk", "private part", "d")


def test_jwk_that_is_not_the_pinned_key_is_refused():
    jwk, _ = _jwk()
    assert_names(refused(bcd_join_encryption_jwk=jwk), "bcd_join_encryption_jwk", "is not bcd_pins.join_encryption")


def test_public_jwk_matching_its_pin_is_accepted_as_mapping_or_json():
    import json

    jwk, pin = _jwk()
    pins = dict(base_vars()["bcd_pins"], join_encryption=pin)
    for value in (jwk, json.dumps(jwk)):
        inv = load(base_vars(bcd_join_encryption_jwk=value, bcd_pins=pins, bcd_control_plane_url=None))
        assert inv.bcd_join_encryption_jwk == jwk


def test_every_problem_gets_its_own_line():
    lines = refused(bcd_image="nginx", bcd_gateway_url="http://x", bcd_gpu_api="x", bcd_typo=1)
    for path in ("bcd_image", "bcd_gateway_url", "bcd_gpu_api", "bcd_typo"):
        assert_names(lines, path)
    assert len(lines) == 4


def test_secret_values_never_appear_in_messages():
    secret = "sk-super-secret-value-0123456789"
    with pytest.raises(ConfigError) as info:
        load(base_vars(bcd_api_key={"nested": secret}, bcd_image=secret))
    text = "\n".join(info.value.lines)
    assert "bcd_api_key" in text
    assert text.count(secret) == 1  # only the image, which is no secret, is echoed
    inv = load(base_vars(bcd_api_key=secret))
    assert secret not in repr(inv) and secret not in str(inv.public())


def test_required_by_playbook():
    with pytest.raises(ConfigError) as info:
        load(base_vars(), required=("bcd_tenant", "bcd_pool"))
    assert info.value.lines == [
        "INVALID_CONFIG: bcd_tenant: is required by this playbook",
        "INVALID_CONFIG: bcd_pool: is required by this playbook",
    ]


def test_not_a_bcd_variable():
    with pytest.raises(ConfigError) as info:
        load({**base_vars(), "namespace": "x"})
    assert "INVALID_CONFIG: namespace: not a bcd_* variable" in info.value.lines


@pytest.mark.parametrize(("given", "canonical"), [
    ("1000m", "1"), ("0.5", "500m"), ("1024Mi", "1Gi"), ("1.5Gi", "1536Mi"), ("2000", "2k"), ("128Mi", "128Mi"),
    ("100m", "100m"), ("1e3", "1e3"), ("0.5Ki", "512"), (2, "2"), ("1000Ki", "1000Ki"),
])
def test_quantities_are_normalised_as_the_api_server_stores_them(given, canonical):
    inv = load(base_vars(bcd_resources={"requests": {"cpu": given}, "limits": {}}))
    assert inv.bcd_resources.requests["cpu"] == canonical


def test_defaults_are_the_seeds():
    inv = load(base_vars())
    assert inv.bcd_namespace == "bcd-system" and inv.bcd_name == "bcd" and inv.bcd_create_namespace is True
    assert inv.bcd_priority_class_name == "system-node-critical"
    assert inv.bcd_nvidia_runtime_class == "nvidia"
    assert inv.bcd_resources.requests == {"cpu": "100m", "memory": "128Mi"}
    assert inv.bcd_resources.limits == {"memory": "512Mi"}
    assert [t.manifest() for t in inv.bcd_tolerations] == [{"operator": "Exists"}]
    assert inv.bcd_gpu_api == "device-plugin" and inv.bcd_host_units is False and inv.bcd_log_level == "info"
    assert inv.bcd_join_token_secret.name == "bcd-join" and inv.bcd_join_token_secret.key == "token"
    assert inv.bcd_kubelet_credentials.preset == "kubeadm"
    assert inv.bcd_container_runtime.files == ["/etc/containerd/config.toml"]
    assert inv.bcd_nvidia_toolkit.dirs == ["/usr/local/nvidia/toolkit/.config"]
    assert inv.bcd_token_ttl == 3600 and inv.bcd_token_max_uses is None


@pytest.mark.parametrize(("ttl", "seconds"), [("1h", 3600), ("90m", 5400), ("1h30m", 5400), (60, 60), ("86400", 86400), ("24h", 86400)])
def test_ttl_forms(ttl, seconds):
    assert load(base_vars(bcd_token_ttl=ttl)).bcd_token_ttl == seconds


def test_extra_vars_strings_are_coerced():
    # -e key=value gives strings; booleans and integers still mean what they say.
    inv = load(base_vars(bcd_host_units="true", bcd_token_max_uses="8", bcd_create_namespace="no"))
    assert inv.bcd_host_units is True and inv.bcd_token_max_uses == 8 and inv.bcd_create_namespace is False


def test_known_variables_cover_the_issue_list():
    wanted = """bcd_image bcd_gateway_url bcd_gateway_server_name bcd_site_id bcd_pins bcd_control_plane_url
    bcd_join_encryption_jwk bcd_join_token_secret bcd_namespace bcd_name bcd_create_namespace bcd_node_selector
    bcd_tolerations bcd_priority_class_name bcd_image_pull_secrets bcd_resources bcd_host_units bcd_gpu_api
    bcd_nvidia_runtime_class bcd_kubelet_credentials bcd_container_runtime bcd_nvidia_toolkit bcd_log_level
    bcd_tenant bcd_pool bcd_token_ttl bcd_token_max_uses bcd_token_key""".split()
    assert set(wanted) <= set(bcd_model.KNOWN_VARIABLES)
