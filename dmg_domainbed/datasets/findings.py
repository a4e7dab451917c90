"""What a data check finds (what was found, what DomainBed expects, how to fix it) and a
dataset's report of them. An ``ERROR`` would stop a job or make DomainBed train or test on other
data than the download's; a warning deserves a look but changes neither; info only describes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dmg_domainbed.shortlist import shortlist

ERROR, WARNING, INFO = "ERROR", "warn", "info"


@dataclass(frozen=True)
class Finding:
    severity: str
    found: str
    expected: str = ""
    fix: str = ""

    def __str__(self) -> str:
        text = self.found
        if self.expected:
            text += f"; expected {self.expected}"
        if self.fix:
            text += f"; fix: {self.fix}"
        return text


@dataclass(frozen=True)
class DomainCount:
    """Images DomainBed would read in one domain, and the download's number (if known)."""

    domain: str
    images: int
    expected: int | None = None


@dataclass
class DatasetReport:
    """The check of one dataset at ``location``; ``present`` is False when its data is not
    there at all."""

    dataset: str
    location: str
    quick: bool
    present: bool = True
    findings: list[Finding] = field(default_factory=list)
    counts: list[DomainCount] = field(default_factory=list)
    decoded: int = 0
    featurizer: str = ""  # the network its input size picks, and its cost

    def add(self, severity: str, found: str, expected: str = "", fix: str = "") -> None:
        self.findings.append(Finding(severity, found, expected, fix))

    def files(self, severity: str, paths: list[str], what: str, expected: str, fix: str) -> None:
        """One finding for ``paths`` (if any), files that ``what``: a few named, then a count."""
        if paths:
            self.add(severity, f"{len(paths):,} file(s) {what}: {shortlist(paths)}", expected, fix)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == WARNING]

    @property
    def ok(self) -> bool:
        return not self.errors
