"""Several ranks per trial, as distributed training runs them: the layout (ranks, nodes, torchrun),
the elastic agent that launches the ranks, and what each rank runs."""
