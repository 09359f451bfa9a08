"""What to measure next: the search space and the strategies (grid, adaptive) that propose trials
from what has been measured, ending with side-by-side confirmation rounds."""
