"""One module per exercise, named ex<folder>.py, each listing CHECKS in order."""
