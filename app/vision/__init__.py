"""Attention in vision: the Recurrent Attention Model (Mnih et al. 2014) and Show, Attend and
Tell (Xu et al. 2015), trained on Fashion-MNIST canvases and scenes.

Layers, importing downward only: ``data``/``scenes`` (images, layouts, captions) ->
``retina``/``ram``/``baseline``/``captioner`` (networks, no web, no training) -> ``train``/
``evaluate`` (loops and metrics) -> ``folders`` (a model folder <-> a loaded model) ->
``app.serving.vision`` (the web layer, with its service and schemas) reads them; nothing
here imports the web."""
