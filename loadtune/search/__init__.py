"""What to measure next: the search space and the strategies (grid, adaptive) that propose trials
from what has been measured; where the race cannot run, ending with side-by-side closing rounds (``closing``)."""
