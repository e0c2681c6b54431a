"""The pair view: the two images, their maps, hover and pin, the group attention tabs."""
