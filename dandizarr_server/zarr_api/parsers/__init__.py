"""Request bodies parsed at the edge: JSON shapes checked, every problem named, typed values out."""
