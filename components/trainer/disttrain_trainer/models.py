"""The models, one small builder per task.

Every published model takes raw inputs, so the saved artifact is all a server needs:
  * text: a batch of strings [n, 1]. Training does not tokenize: the trainer turns its
    shard into token ids once (`text_vectorizer`), trains the `text_core` model on the
    ids, and publishes `with_vectorizer(core)`, the same layers behind the vectorizer;
  * image: uint8 pixels [n, h, w, c]; scaling to [0, 1] (and resizing, for the
    compute-bound architectures) happens inside.
Classifiers end in a softmax over the label names; the face model ends in an
L2-normalised embedding (see triplets.py for how it is trained).
"""

import keras

# the image architectures of --model: the small CNN, or a keras.applications network
# (weights=None: trained from scratch; these are the compute-bound models for scaling studies)
IMAGE_MODELS = ("cnn", "mobilenetv2", "resnet50")


def text_vectorizer(vocabulary, ragged=False):
    """Strings [n, 1] -> token ids [n, longest], 0-padded (padding is masked downstream);
    ragged: one row of ids per string, as long as the string (the trainer pads per batch)."""
    return keras.layers.TextVectorization(vocabulary=vocabulary, output_mode="int", ragged=ragged, name="vectorize")


def build_text_core(vocabulary_size, n_labels, width=64, dropout=0.5):
    """Token ids -> label probabilities: an embedding bag (the mean of the review's token
    embeddings) + softmax. The embedding's gradient is sparse (only the batch's tokens
    have one), so a synchronous step all-gathers those rows instead of all-reducing a
    dense 20,000 x 64 matrix, and the step's compute is a gather, not a
    [batch x vocabulary] matmul (measured: 5-6 ms per batch-64 step on one thread against 8 ms for
    the multi-hot MLP it replaces, same held-out accuracy, 0.77 on movie reviews)."""
    ids = keras.Input(shape=(None,), dtype="int64", name="token_ids")
    x = keras.layers.Embedding(vocabulary_size, width, mask_zero=True, name="embedding")(ids)
    x = keras.layers.GlobalAveragePooling1D(name="bag")(x)  # masked mean: padding does not count
    x = keras.layers.Activation("relu", name="relu")(x)
    x = keras.layers.Dropout(dropout, name="dropout")(x)
    outputs = keras.layers.Dense(n_labels, activation="softmax", name="probabilities")(x)
    return keras.Model(ids, outputs, name="text_embedding_bag")


def with_vectorizer(core, vectorizer):
    """The published text model: raw strings in, the trained core's layers behind the vectorizer."""
    text = keras.Input(shape=(1,), dtype="string", name="text")
    return keras.Model(text, core(vectorizer(text)), name="text_classifier")


def build_image_model(height, width, channels, n_labels, dropout=0.3, architecture="cnn", image_size=None, hidden=64):
    inputs = keras.Input(shape=(height, width, channels), dtype="uint8", name="image")
    x = keras.layers.Rescaling(1.0 / 255.0, name="scale")(inputs)
    if architecture != "cnn":
        return build_application(inputs, x, n_labels, architecture, image_size or max(height, width, 32))
    filters, size = 16, min(height, width)
    while True:  # conv blocks until the feature map is small; 8x8 digits get two, 32x32 images four
        x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu", name=f"conv{filters}")(x)
        if size <= 4:
            break
        x = keras.layers.MaxPooling2D(name=f"pool{filters}")(x)
        filters, size = filters * 2, size // 2
    x = keras.layers.Flatten(name="flatten")(x)
    x = keras.layers.Dense(hidden, activation="relu", name="hidden")(x)
    x = keras.layers.Dropout(dropout, name="dropout")(x)
    outputs = keras.layers.Dense(n_labels, activation="softmax", name="probabilities")(x)
    return keras.Model(inputs, outputs, name="image_cnn")


def build_application(inputs, scaled, n_labels, architecture, image_size):
    """A keras.applications network (random initial weights) on images resized to image_size:
    the artifact still takes the dataset's own image shape."""
    x = keras.layers.Resizing(image_size, image_size, name="resize")(scaled)
    network = {"mobilenetv2": keras.applications.MobileNetV2, "resnet50": keras.applications.ResNet50}[architecture]
    features = network(
        weights=None, include_top=False, pooling="avg", input_shape=(image_size, image_size, x.shape[-1])
    )
    for layer in features.layers:
        # keras.applications' batch norms average their statistics over ~1,000 steps
        # (momentum 0.999); trained from scratch for a few hundred steps, the held-out
        # predictions would use statistics still near their initial values (measured:
        # chance accuracy on digits after 3 epochs). 0.9 follows the training in ~10 steps.
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = 0.9
    outputs = keras.layers.Dense(n_labels, activation="softmax", name="probabilities")(features(x))
    return keras.Model(inputs, outputs, name=f"image_{architecture}")


def build_face_model(height, width, channels, embedding_size=64):
    """A face crop -> an L2-normalised embedding (FaceNet-style): distances between
    embeddings compare faces."""
    inputs = keras.Input(shape=(height, width, channels), dtype="uint8", name="face")
    x = keras.layers.Rescaling(1.0 / 255.0, name="scale")(inputs)
    for filters in (32, 64, 128):
        x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu", name=f"conv{filters}a")(x)
        x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu", name=f"conv{filters}b")(x)
        x = keras.layers.MaxPooling2D(name=f"pool{filters}")(x)
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    x = keras.layers.Dense(embedding_size, name="embedding")(x)
    outputs = keras.layers.UnitNormalization(name="l2_normalise")(x)
    return keras.Model(inputs, outputs, name="face_embedding")


def find_layer(model, kind):
    """The first layer of class `kind` in the model or in a model nested in it, or None."""
    return next(iter(find_layers(model, kind)), None)


def find_layers(model, kind):
    """Every layer of class `kind` in the model and in the models nested in it."""
    found, layers = [], list(model.layers)
    while layers:
        layer = layers.pop()
        if isinstance(layer, kind):
            found.append(layer)
        layers.extend(getattr(layer, "layers", []))
    return found
