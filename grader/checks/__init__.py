"""One module per exercise, named ex<folder>.py, each listing CHECKS in order; the constants
their diagnoses share are defined here, once."""

LOG2E = 1.4426950408889634  # log2(e): the kernels compute exp(x) as exp2(x * LOG2E)
# Block sizes a student's attention kernel may use (rows or keys per program), to recognise the
# bugs tied to one block: a dropped last block, a mask that hides part of a tile.
BLOCK_GUESSES = (16, 32, 64, 128)
