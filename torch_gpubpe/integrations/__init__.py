"""Where the package meets frameworks: the torch dataset and collators, Ray."""
