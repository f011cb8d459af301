"""Simulated nodes as separate hosts: one Linux network namespace per node (`run --local --netns`).

Loopback addresses (127.0.0.2, 127.0.0.3, ...) are one host's; here each node gets a namespace
of its own with one interface, ``eth0``, and an address on a private bridge, so MASTER_ADDR is
really another host and gloo crosses a (virtual) wire:

    trainspec-<pid>-hub      bridge br0, one veth end per node
    trainspec-<pid>-<node>   lo + eth0 = 10.213.0.<node + 2>/24, no route anywhere else

Nothing is connected to the machine's own network. Needs root and iproute2; every namespace
(and with it every veth) is deleted on exit, whatever happened.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import List, Optional

SUBNET = "10.213.0"
INTERFACE = "eth0"


class NetnsError(RuntimeError):
    """The namespaces could not be made (not root, no `ip`, ...)."""


def unavailable() -> Optional[str]:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return "--netns needs root and iproute2's `ip` (it creates network namespaces)"
    return None


class Loopback:
    """The default: every node on this host's loopback, at its own address."""

    interface = "lo"

    def address(self, node: int) -> str:
        from trainspec.runtime.procs import loopback_host

        return loopback_host(node)

    def netns(self, node: int) -> Optional[str]:
        return None

    def free_port(self) -> int:
        from trainspec.runtime.procs import free_port, loopback_host

        return free_port(loopback_host(0))

    def port_taken(self, port: int) -> bool:
        """Whether something already listens on node 0's address at port (a TIME_WAIT left by an
        earlier run does not count: servers bind with SO_REUSEADDR)."""
        import socket

        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((self.address(0), port))
            except OSError:
                return True
        return False


class Namespaces:
    """One network namespace per simulated node, joined by a bridge; a context manager."""

    interface = INTERFACE

    def __init__(self, nodes: int) -> None:
        if not 1 <= nodes <= 200:
            raise NetnsError(f"{nodes} nodes: --netns simulates 1 to 200")
        self.nodes = nodes
        self.prefix = f"trainspec-{os.getpid()}"
        self.created: List[str] = []

    def address(self, node: int) -> str:
        return f"{SUBNET}.{node + 2}"

    def netns(self, node: int) -> Optional[str]:
        return f"{self.prefix}-{node}"

    def free_port(self) -> int:
        """Any port: nothing listens in namespaces this run just made."""
        from trainspec.runtime.procs import free_port

        return free_port()

    def port_taken(self, port: int) -> bool:
        """Never: nothing listens in namespaces this run just made."""
        return False

    def __enter__(self) -> "Namespaces":
        reason = unavailable()
        if reason:
            raise NetnsError(reason)
        hub = f"{self.prefix}-hub"
        try:
            self._ip("netns", "add", hub)
            self.created.append(hub)
            self._ip("-n", hub, "link", "add", "br0", "type", "bridge")
            self._ip("-n", hub, "link", "set", "br0", "up")
            for node in range(self.nodes):
                ns, port = self.netns(node), f"n{node}"
                self._ip("netns", "add", ns)
                self.created.append(ns)
                self._ip("-n", ns, "link", "set", "lo", "up")
                self._ip("-n", ns, "link", "add", INTERFACE, "type", "veth", "peer", "name", port, "netns", hub)
                self._ip("-n", ns, "addr", "add", f"{self.address(node)}/24", "dev", INTERFACE)
                self._ip("-n", ns, "link", "set", INTERFACE, "up")
                self._ip("-n", hub, "link", "set", port, "master", "br0")
                self._ip("-n", hub, "link", "set", port, "up")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        for ns in reversed(self.created):  # a namespace takes its veth ends with it
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.created = []

    @staticmethod
    def _ip(*args: str) -> None:
        done = subprocess.run(["ip", *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise NetnsError(f"ip {' '.join(args)}: {done.stderr.strip()}")
