"""Presentation: everything printed or drawn (rich tables and panels, progress, JUnit/Markdown,
plots). Renders results and analysis; decides nothing."""
