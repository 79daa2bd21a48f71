"""Wrong results of the comparison allocators that are their own known bugs.

A failed run that matches an entry here is still recorded and shown in the report, but
does not make the harness exit non-zero (unless --strict). Entries never name hakmem:
every hakmem failure is a failure.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class KnownIssue:
    allocator: str
    workload: str
    message_contains: str
    why: str


KNOWN_ISSUES = [
    KnownIssue(
        "mimalloc", "aligned", "not aligned",
        "mimalloc 2.0.9 (the Debian package) returns blocks that are not aligned when the "
        "size equals an alignment of 256, 512 or 1024 bytes; fixed upstream in later releases."),
]


def match(record):
    """The KnownIssue explaining a failed run, or None."""
    if record.get("status") == "ok" or str(record.get("allocator", "")).startswith("hakmem"):
        return None
    for issue in KNOWN_ISSUES:
        if (record.get("allocator") == issue.allocator and record.get("workload") == issue.workload
                and issue.message_contains in (record.get("message") or "")):
            return issue
    return None
