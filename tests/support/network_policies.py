"""Kubernetes NetworkPolicies evaluated as a cluster applies them, over pods given as
{"namespace", "labels"} (the policies' own namespace is "ns"), for the render tests."""

from __future__ import annotations


def _selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(key) == value for key, value in (selector.get("matchLabels") or {}).items())


def _peer_matches(peer: dict, pod: dict) -> bool:
    """A NetworkPolicy peer against a pod {"namespace", "labels"} (the policies' namespace is "ns")."""
    assert "ipBlock" not in peer  # none rendered; ipBlock rules would need addresses
    if "namespaceSelector" not in peer and pod["namespace"] != "ns":
        return False
    return _selects(peer.get("podSelector") or {}, pod["labels"])


def allowed(policies: list[dict], direction: str, subject: dict, peer: dict) -> bool:
    """Whether `subject`'s policies let traffic of `direction` (Ingress: from peer, Egress: to peer)."""
    key, field = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    selecting = [policy["spec"] for policy in policies if direction in policy["spec"]["policyTypes"]
                 and subject["namespace"] == "ns" and _selects(policy["spec"]["podSelector"], subject["labels"])]
    if not selecting:
        return True  # not isolated in this direction
    return any(not rule.get(field) or any(_peer_matches(p, peer) for p in rule[field])
               for spec in selecting for rule in spec.get(key) or [])


def connects(policies: list[dict], source: dict, target: dict) -> bool:
    return allowed(policies, "Egress", source, target) and allowed(policies, "Ingress", target, source)
