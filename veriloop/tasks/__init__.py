"""Task suites: named, versioned lists of Task records loaded from packaged or shared data."""

from veriloop.tasks.base import SUITES, Suite, load_suite

__all__ = ["SUITES", "Suite", "load_suite"]
