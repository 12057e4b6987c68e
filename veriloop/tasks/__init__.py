"""Task suites: named, versioned lists of Task records loaded from packages, downloads, task files or datasets."""

from veriloop.tasks.base import ORIGINS, SUITES, Suite, load_suite

__all__ = ["ORIGINS", "SUITES", "Suite", "load_suite"]
