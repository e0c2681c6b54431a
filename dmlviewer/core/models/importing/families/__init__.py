"""The import families, one module each (see ``..family``); ``..registry.FAMILIES`` lists them in
the order :func:`..plan.analyze` walks them."""
