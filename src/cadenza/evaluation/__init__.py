"""How good is a model: NLL over a split, musical metrics of samples, memorisation, reports."""
