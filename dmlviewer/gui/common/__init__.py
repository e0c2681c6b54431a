"""Small pieces every view uses: error dialogs, the problems list, layout helpers."""
