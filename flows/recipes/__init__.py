"""One package per recipe: its Prefect flow and the stages and rules that belong to it alone."""
