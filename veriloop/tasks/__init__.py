"""Task suites: named, versioned lists of Task records loaded from packaged or shared data."""
