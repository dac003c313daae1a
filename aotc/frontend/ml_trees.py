"""Tree ensembles (ai.onnx.ml TreeEnsembleRegressor, TreeEnsembleClassifier, TreeEnsemble)
as graphs of ai.onnx operators; placeholder filled below."""
TREE_BUILDERS = {}
