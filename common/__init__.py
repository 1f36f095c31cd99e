"""What graders, solutions and benchmarks share: device set-up, references, inputs, tolerances."""
