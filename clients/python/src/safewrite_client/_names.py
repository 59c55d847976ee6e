"""The names Kubernetes accepts where this client checks one before sending: qualified
names (condition types, finalizers), as apimachinery's ``IsQualifiedName``."""

from __future__ import annotations

import re

# A DNS-1123 subdomain (the optional prefix) and the name part of a qualified name.
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def is_qualified_name(value: str) -> bool:
    """Whether ``value`` is ``[prefix/]name``: a name of at most 63 characters of
    ``[A-Za-z0-9-_.]`` starting and ending alphanumeric, and an optional prefix that is a
    DNS subdomain of at most 253 characters (e.g. ``"Ready"``,
    ``"example.com/cleanup"``)."""
    prefix, slash, name = value.rpartition("/")
    if slash and not (len(prefix) <= 253 and _SUBDOMAIN.match(prefix)):
        return False
    return len(name) <= 63 and _NAME.match(name) is not None
