package dev.safewrite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Constructor;
import java.lang.reflect.Executable;
import java.lang.reflect.Field;
import java.lang.reflect.GenericArrayType;
import java.lang.reflect.Member;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.lang.reflect.ParameterizedType;
import java.lang.reflect.RecordComponent;
import java.lang.reflect.Type;
import java.lang.reflect.TypeVariable;
import java.lang.reflect.WildcardType;
import java.net.URI;
import java.nio.file.FileSystem;
import java.nio.file.FileSystems;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * The API of {@code dev.safewrite} is the client's own types: no public or protected member of a
 * public class mentions a generated type ({@code dev.safewrite.v1}) or the protobuf runtime they
 * are built on, in its parameters, return type, exceptions, generic signature, field type or record
 * components, nor does a public class extend or implement one. The classes are found where {@link
 * SafewriteClient} was loaded from: target/classes, or the jar.
 */
class PublicSurfaceTest {
  private static final List<String> GENERATED =
      List.of("dev.safewrite.v1.", "com.google.protobuf.");

  @Test
  void noPublicSignatureMentionsAGeneratedType() throws Exception {
    List<Class<?>> classes = publicClasses();
    assertTrue(
        classes.contains(SafewriteClient.class) && classes.contains(SafewriteException.class),
        "the scan found the package: " + classes);
    assertTrue(classes.size() > 30, "only " + classes.size() + " public classes found");
    List<String> found = new ArrayList<>();
    for (Class<?> type : classes) {
      found.addAll(mentions(type));
    }
    assertEquals(List.of(), found, "public signatures of dev.safewrite naming generated types");
  }

  /** The check sees what it looks for: a member of each kind naming a generated type. */
  @Test
  void theCheckFindsAGeneratedTypeWhereverItIsNamed() {
    List<String> found = mentions(Leaky.class);
    for (String member :
        List.of(
            "Leaky.field",
            "Leaky.method()",
            "Leaky.parameter(",
            "Leaky.generic()",
            "Leaky(dev.safewrite.v1.Fence)",
            "Pair component")) {
      assertTrue(found.stream().anyMatch(m -> m.contains(member)), member + " in " + found);
    }
    assertTrue(mentions(Sealed.class).isEmpty(), "private and package members are not API");
  }

  /** Public members naming generated types, each way one can. */
  public static class Leaky {
    public dev.safewrite.v1.Mutation field;

    public Leaky(dev.safewrite.v1.Fence ctor) {}

    public dev.safewrite.v1.Mutation method() {
      return null;
    }

    public void parameter(String given, dev.safewrite.v1.ObjectRef ref) {}

    protected List<Map<String, ? extends dev.safewrite.v1.Reason>> generic() {
      return null;
    }

    public record Pair(dev.safewrite.v1.Retry record) {}
  }

  /** Generated types only where callers cannot see them. */
  public static class Sealed {
    dev.safewrite.v1.Mutation field;

    private dev.safewrite.v1.Mutation method() {
      return field;
    }
  }

  /** Every public top-level class of package dev.safewrite on the class path. */
  private static List<Class<?>> publicClasses() throws Exception {
    URI location =
        SafewriteClient.class.getProtectionDomain().getCodeSource().getLocation().toURI();
    Path root = Path.of(location);
    List<String> names = new ArrayList<>();
    if (Files.isDirectory(root)) {
      names.addAll(classNames(root.resolve("dev/safewrite")));
    } else {
      try (FileSystem jar = FileSystems.newFileSystem(root)) {
        names.addAll(classNames(jar.getPath("dev/safewrite")));
      }
    }
    List<Class<?>> classes = new ArrayList<>();
    for (String name : names) {
      Class<?> type = Class.forName("dev.safewrite." + name, false, getLoader());
      if (isVisible(type)) {
        classes.add(type);
      }
    }
    return classes;
  }

  private static ClassLoader getLoader() {
    return SafewriteClient.class.getClassLoader();
  }

  /** The classes directly in {@code dir}, not in sub-packages such as the generated v1. */
  private static List<String> classNames(Path dir) throws Exception {
    try (Stream<Path> files = Files.list(dir)) {
      return files
          .map(file -> file.getFileName().toString())
          .filter(file -> file.endsWith(".class") && !file.equals("package-info.class"))
          .map(file -> file.substring(0, file.length() - ".class".length()).replace('$', '.'))
          .filter(name -> !name.contains(".")) // nested ones: through their outer class
          .sorted()
          .toList();
    }
  }

  /** Public, and, when nested, inside public classes only. */
  private static boolean isVisible(Class<?> type) {
    for (Class<?> c = type; c != null; c = c.getEnclosingClass()) {
      if (!Modifier.isPublic(c.getModifiers())) {
        return false;
      }
    }
    return true;
  }

  private static boolean isApi(Member member) {
    return !member.isSynthetic()
        && (Modifier.isPublic(member.getModifiers())
            || Modifier.isProtected(member.getModifiers()));
  }

  /** The public or protected members of {@code type} naming a generated type, as text. */
  static List<String> mentions(Class<?> type) {
    List<String> found = new ArrayList<>();
    check(found, type.getName() + " extends", type.getGenericSuperclass());
    for (Type face : type.getGenericInterfaces()) {
      check(found, type.getName() + " implements", face);
    }
    for (Field field : type.getDeclaredFields()) {
      if (isApi(field)) {
        check(found, field.toGenericString(), field.getGenericType());
      }
    }
    for (Method method : type.getDeclaredMethods()) {
      if (isApi(method)) {
        executable(found, method);
        check(found, method.toGenericString(), method.getGenericReturnType());
      }
    }
    for (Constructor<?> constructor : type.getDeclaredConstructors()) {
      if (isApi(constructor)) {
        executable(found, constructor);
      }
    }
    if (type.isRecord()) {
      for (RecordComponent component : type.getRecordComponents()) {
        check(found, type.getName() + " component " + component, component.getGenericType());
      }
    }
    for (Class<?> nested : type.getDeclaredClasses()) {
      if (Modifier.isPublic(nested.getModifiers()) || Modifier.isProtected(nested.getModifiers())) {
        found.addAll(mentions(nested));
      }
    }
    return found;
  }

  private static void executable(List<String> found, Executable executable) {
    String name = executable.toGenericString();
    for (Type parameter : executable.getGenericParameterTypes()) {
      check(found, name, parameter);
    }
    for (Type thrown : executable.getGenericExceptionTypes()) {
      check(found, name, thrown);
    }
    for (TypeVariable<?> variable : executable.getTypeParameters()) {
      check(found, name, variable);
    }
  }

  private static void check(List<String> found, String where, Type type) {
    if (type != null && names(type, new HashSet<>())) {
      found.add(where);
    }
  }

  /** Whether {@code type}, or any type it is made of, is a generated one. */
  private static boolean names(Type type, Set<Type> seen) {
    if (!seen.add(type)) {
      return false;
    }
    if (type instanceof Class<?> c) {
      if (c.isArray()) {
        return names(c.getComponentType(), seen);
      }
      return GENERATED.stream().anyMatch(c.getName()::startsWith);
    }
    if (type instanceof ParameterizedType p) {
      return names(p.getRawType(), seen)
          || (p.getOwnerType() != null && names(p.getOwnerType(), seen))
          || Stream.of(p.getActualTypeArguments()).anyMatch(t -> names(t, seen));
    }
    if (type instanceof WildcardType w) {
      return Stream.concat(Stream.of(w.getUpperBounds()), Stream.of(w.getLowerBounds()))
          .anyMatch(t -> names(t, seen));
    }
    if (type instanceof TypeVariable<?> v) {
      return Stream.of(v.getBounds()).anyMatch(t -> names(t, seen));
    }
    if (type instanceof GenericArrayType a) {
      return names(a.getGenericComponentType(), seen);
    }
    return false;
  }
}
