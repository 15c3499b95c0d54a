"""HTTP views: check who asks, parse the body, call a service or selector, shape the answer."""
