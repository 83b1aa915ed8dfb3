"""Attention in vision: the Recurrent Attention Model (Mnih et al. 2014) and Show, Attend and
Tell (Xu et al. 2015), trained on Fashion-MNIST canvases and scenes.

Layers, importing downward only: ``data``/``scenes`` (images, layouts, captions) ->
``retina``/``ram``/``baseline``/``captioner`` (networks, no web, no training) -> ``train``/
``evaluate`` (loops and metrics) -> ``folders`` (a model folder <-> a loaded model) ->
``service`` (the models behind the API). Nothing here imports the web: ``attnscope.serving.vision``
(routes and schemas) reads the service and turns its errors into HTTP answers."""
