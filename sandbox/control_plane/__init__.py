"""The local control-plane emulator: plays bcd's control plane for the sandbox.

It serves docs/control-plane-api.md over HTTPS on 127.0.0.1 and, standing in for
bcd's ``join`` init container, joins the sandbox cluster's bcd pods as bcd would.
"""
