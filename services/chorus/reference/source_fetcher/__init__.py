"""The source fetcher: fetches research sources, many at once, for the report's sources stage."""
