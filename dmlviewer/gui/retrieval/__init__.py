"""Finding images: the dataset browser, thumbnails, retrieval, the search index, the embedding map."""
