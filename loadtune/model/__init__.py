"""The data model: configs, trials, results and their versioned JSON. Imports no other layer."""
