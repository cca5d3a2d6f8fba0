"""The models, one small builder per task.

All take raw inputs, so the saved artifact is all a server needs:
  * text: a batch of strings [n, 1]; TextVectorization (with the copier's
    vocabulary) turns them into bag-of-words vectors inside the model;
  * image: uint8 pixels [n, h, w, c]; scaling to [0, 1] happens inside.
Classifiers end in a softmax over the label names; the face model ends in an
L2-normalised embedding (see triplets.py for how it is trained).
"""

import keras


def build_text_model(vocabulary, n_labels, hidden=64, dropout=0.5):
    inputs = keras.Input(shape=(1,), dtype="string", name="text")
    # multi_hot bag of words: robust on short reviews, and averages well across workers
    x = keras.layers.TextVectorization(vocabulary=vocabulary, output_mode="multi_hot", name="vectorize")(inputs)
    x = keras.layers.Dense(hidden, activation="relu", name="hidden")(x)
    x = keras.layers.Dropout(dropout, name="dropout")(x)
    outputs = keras.layers.Dense(n_labels, activation="softmax", name="probabilities")(x)
    return keras.Model(inputs, outputs, name="text_bow_mlp")


def build_image_model(height, width, channels, n_labels, dropout=0.3):
    inputs = keras.Input(shape=(height, width, channels), dtype="uint8", name="image")
    x = keras.layers.Rescaling(1.0 / 255.0, name="scale")(inputs)
    filters, size = 16, min(height, width)
    while True:  # conv blocks until the feature map is small; 8x8 digits get two, 32x32 images four
        x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu", name=f"conv{filters}")(x)
        if size <= 4:
            break
        x = keras.layers.MaxPooling2D(name=f"pool{filters}")(x)
        filters, size = filters * 2, size // 2
    x = keras.layers.Flatten(name="flatten")(x)
    x = keras.layers.Dense(64, activation="relu", name="hidden")(x)
    x = keras.layers.Dropout(dropout, name="dropout")(x)
    outputs = keras.layers.Dense(n_labels, activation="softmax", name="probabilities")(x)
    return keras.Model(inputs, outputs, name="image_cnn")


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


def build_model(manifest, vocabulary=None, embedding_size=64):
    if manifest.task == "faces":
        spec = manifest.input
        return build_face_model(spec["height"], spec["width"], spec["channels"], embedding_size)
    if manifest.task == "text":
        return build_text_model(vocabulary, len(manifest.labels))
    spec = manifest.input
    return build_image_model(spec["height"], spec["width"], spec["channels"], len(manifest.labels))
